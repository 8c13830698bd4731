// Where a decode step's host-resident experts are computed (--decode-experts, issue 24).
//
// A decode token routes k experts per layer. Those in VRAM run on the GPU. Those in host slots
// can reach the result by two paths of similar width on a PC: a PCIe copy into a transient slot
// and the GPU's kernel, or the CPU reading the host slot in place (no copy). The split between
// them is chosen per layer from rates measured at start-up (HostPathRates), so that both paths
// end together. The split moves where an expert is computed, never which experts routing chose;
// results differ only by the float rounding of the two backends' kernels.
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "util/named_enum.h"

namespace bg {

// gpu: every expert is computed on the GPU (host-resident ones copied over PCIe first); cpu:
// every host-resident expert on the CPU where it lies; hybrid: split by the measured rates;
// auto: hybrid where the experts' device is a GPU, gpu on the CPU backend (its "device" is the
// same CPU, so there is no second path).
enum class DecodeExperts { kAuto, kGpu, kCpu, kHybrid };
template <>
struct EnumNames<DecodeExperts> {
    static constexpr NamedValue<DecodeExperts> kNames[] = {{DecodeExperts::kAuto, "auto"},
                                                           {DecodeExperts::kGpu, "gpu"},
                                                           {DecodeExperts::kCpu, "cpu"},
                                                           {DecodeExperts::kHybrid, "hybrid"}};
    static constexpr const char* kWhat = "--decode-experts";
};

// auto resolved for a run whose dense weights are (or are not) on a GPU.
DecodeExperts resolve_decode_experts(DecodeExperts mode, bool on_gpu);

// The MoE calls whose host-resident experts may go to the CPU, in positions
// (dsv41::ForwardConfig::host_expert_positions): up to max_positions (--host-expert-positions:
// decode steps and short prompts), none under gpu. Larger calls keep the GPU path: in a prefill
// each expert serves many tokens, and the CPU's time grows with them where a copy's does not.
inline int64_t host_expert_positions(DecodeExperts resolved, int64_t max_positions) {
    return resolved == DecodeExperts::kGpu ? 0 : max_positions;
}
// --host-expert-positions takes 1..kMaxHostExpertPositions (the CPU's buffers grow with it).
constexpr int64_t kMaxHostExpertPositions = 64;

// How a split expert's copied part (its hidden rows [f, n_ff)) reaches the device: those rows of
// gate and up, and of down either those columns (a 2D copy of n_embd short rows: the fewest
// bytes, but the copy engine takes each row apart) or all of it (contiguous with up's rows: at
// the copy's full rate, but the CPU's columns cross too, and the copy engine's extra reads of host
// memory compete with the CPU's). Which pays depends on the machine: --split-copy.
enum class SplitCopy : uint8_t { kColumns, kWholeDown };
template <>
struct EnumNames<SplitCopy> {
    static constexpr NamedValue<SplitCopy> kNames[] = {{SplitCopy::kColumns, "columns"}, {SplitCopy::kWholeDown, "whole-down"}};
    static constexpr const char* kWhat = "--split-copy";
};

// What one host-resident expert costs on each path, measured at start-up on a real expert of
// the model (Session: TieredExpertStore::probe_host_path and Forward::time_expert_ms).
struct HostPathRates {
    double cpu_ms_one = 0;        // the CPU computing it for one token (its weights read once)
    double cpu_ms_per_token = 0;  // each further token
    double copy_ms = 0;           // its bytes from a host slot into a transient slot
    double gpu_ms = 0;            // the GPU computing it for one token, from device memory
    // The GPU computing it for one token reading its weights from the host slot, over PCIe (the
    // slots are pinned, which a kernel can read in place): recorded beside the copy's path, which
    // the split uses, to see whether skipping the copy would pay.
    double gpu_in_place_ms = 0;
    // The copy of part of an expert's hidden rows (split_host_experts) costs copy_ms times
    // (part_copy_fixed + part_copy_slope x its share of the rows), fitted at start-up to such a
    // copy at about half the rows (TieredExpertStore::probe_host_path) in the form the run copies
    // parts (SplitCopy): with down's columns, fixed 0 and the slope measured; with all of down,
    // the slope 1 - fixed and fixed measured (about down's share of the bytes). part_copy_fixed
    // < 0: not measured, and no expert is split.
    double part_copy_fixed = -1, part_copy_slope = 0;
    double part_copy_ms(double rows_share) const { return copy_ms * (part_copy_fixed + part_copy_slope * rows_share); }
    // Fits part_copy_fixed and part_copy_slope (copy_ms set) to one part's copy of part_ms for a
    // rows_share of the rows (0 < rows_share < 1), copied in the given form (SplitCopy).
    void fit_part_copy(SplitCopy form, double part_ms, double rows_share);
    double cpu_ms(int64_t tokens) const { return cpu_ms_one + static_cast<double>(tokens - 1) * cpu_ms_per_token; }
    nlohmann::json to_json() const;
};

// How an expert's hidden rows may be split between the paths: in steps of step_rows (whole
// blocks of the down projection's type, which its columns are cut at), at least one step on each
// side. step_rows 0: never.
struct SplitRows {
    int64_t n_ff = 0;
    int64_t step_rows = 0;
};
// The split step for experts of n_ff hidden rows whose down projection's blocks hold `block`
// weights: the smallest multiple of both 32 and block that divides n_ff into at most 16 steps
// (2304 rows of MXFP4 or Q8_0: 192, 12 steps; of a K-quant: 256, 9); 0 where none does, or where
// n_ff has fewer than two steps.
int64_t split_step_rows(int64_t n_ff, int64_t block);

// Where split_host_experts puts the host-resident experts of a layer: on_cpu[i] says which go to
// the CPU whole; `split`, where not -1, is one more (an index into the list, on_cpu 0) whose hidden
// rows [0, cpu_rows) the CPU computes in place while the rest are copied and computed on the GPU.
struct HostSplit {
    int64_t on_cpu = 0;  // experts the CPU computes whole
    int64_t split = -1;
    int64_t cpu_rows = 0;
};

// Chooses which of n host-resident experts (tokens[i] tokens each) the CPU computes in place:
// on_cpu[i] = 1 for those, 0 for those copied to the GPU.
//   gpu: none. cpu: all. hybrid: the c experts with the fewest tokens (ties by position in the
//   list), c minimising max(CPU time, copy time + one GPU kernel): the compute thread computes
//   CPU experts while the copies land, and the GPU kernel of each copied expert is short, so the
//   layer ends when the slower of the two paths does. Ties choose the smaller c.
//   With whole experts the two paths rarely end together (four host experts of a layer on an H100
//   machine: three on the CPU end at 0.72 ms where both paths at once would end at 0.58), so
//   where `rows` allows and rates.part_copy_fixed is measured, the next expert by tokens may be
//   split (HostSplit): its first cpu_rows hidden rows on the CPU at that share of its CPU time, the
//   rest copied at rates.part_copy_ms of their share. A split is chosen only where it
//   ends the layer kSplitMinGainMs sooner than the best whole choice.
//   probe_cpu (hybrid): where the rates give the CPU nothing, it takes the expert with the fewest
//   tokens anyway, so a CPU rate that is too slow gets measured again (below); *probed (where
//   given) says whether it did.
// `order` is n entries of caller scratch (nothing is allocated). A pure function of its inputs.
HostSplit split_host_experts(DecodeExperts mode, const HostPathRates& r, const int32_t* tokens, int64_t n,
                             uint8_t* on_cpu, int32_t* order, bool probe_cpu = false, bool* probed = nullptr,
                             SplitRows rows = {});
constexpr double kSplitMinGainMs = 0.01;

// Decode layers in a row whose split gave the CPU none after which the next gives it one
// (TieredExpertStore): the CPU's rate is learnt only from the experts it computes, so one slow
// start-up figure would otherwise keep it idle for the whole run. On the H200 machine of
// 2026-12-05 14:40 the start-up figure read 5.1 ms for an expert the CPU computes in about 0.3,
// twice, and those runs copied every host expert (89.6 and 119.6 tok/s where the others of the
// machine gave 118-125 and, the hour before, 173.7). At one probe in 32 layers a CPU that is
// really that slow costs one slow expert in 32 layers.
constexpr int64_t kCpuProbeEveryLayers = 32;

}  // namespace bg
