// The host's memory read rate: threads each summing their share of a buffer larger than the
// caches, 64-bit words in four chains (so the adds never limit the reads), best of several reads.
// The denominator of issue 24's CPU targets: bench_cpu's of_probe and the harness's decode bound
// (`betelgeuse probe-host`).
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"

namespace bg::cpu {

// GB/s of the best of `reps` reads of buf[0..n_words) by the pool's threads (pool) or by the
// calling thread alone (pool == nullptr).
double host_read_gb_s(ThreadPool* pool, const uint64_t* buf, int64_t n_words, int reps);

// One read of buf[0..n_words) as host_read_gb_s times it, untimed (a pass of a probe that times
// several, cuda::probe_pcie_beside_reads); returns the bytes read.
uint64_t host_read_pass(ThreadPool* pool, const uint64_t* buf, int64_t n_words);

}  // namespace bg::cpu
