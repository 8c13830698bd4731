// Raw-hardware probe of the integer tensor cores: the int8 MMA rate this GPU reaches with
// mma.sync m16n8k32 (the instruction the integer kernels issue), so bench_gpu can set an int8
// kernel against "MMA time at the measured peak" in the same run.
#pragma once

namespace bg::cuda {

// Tera-operations per second (2 per multiply-add) of independent mma.sync m16n8k32 s8 chains on
// every SM, register operands only, median of a few timed launches.
double int8_mma_peak_tops();

}  // namespace bg::cuda
