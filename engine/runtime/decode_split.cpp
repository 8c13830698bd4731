#include "runtime/decode_split.h"

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "util/check.h"

namespace bg {

DecodeExperts resolve_decode_experts(DecodeExperts mode, bool on_gpu) {
    if (mode != DecodeExperts::kAuto) return mode;
    return on_gpu ? DecodeExperts::kHybrid : DecodeExperts::kGpu;
}

nlohmann::json HostPathRates::to_json() const {
    return {{"cpu_ms_one", cpu_ms_one},
            {"cpu_ms_per_token", cpu_ms_per_token},
            {"copy_ms", copy_ms},
            {"gpu_ms", gpu_ms},
            {"gpu_in_place_ms", gpu_in_place_ms},
            {"part_copy_fixed", part_copy_fixed},
            {"part_copy_slope", part_copy_slope}};
}

void HostPathRates::fit_part_copy(SplitCopy form, double part_ms, double rows_share) {
    BG_CHECK(rows_share > 0 && rows_share < 1 && copy_ms > 0 && part_ms >= 0);
    const double share = part_ms / copy_ms;
    if (form == SplitCopy::kColumns) {
        part_copy_fixed = 0;
        part_copy_slope = share / rows_share;
    } else {
        part_copy_fixed = std::clamp((share - rows_share) / (1 - rows_share), 0.0, 1.0);
        part_copy_slope = 1 - part_copy_fixed;
    }
}

int64_t split_step_rows(int64_t n_ff, int64_t block) {
    BG_CHECK(n_ff >= 0 && block >= 1);
    const int64_t base = std::lcm<int64_t>(32, block);
    for (int64_t step = base; 2 * step <= n_ff; step += base)
        if (n_ff % step == 0 && n_ff / step <= 16) return step;
    return 0;
}

HostSplit split_host_experts(DecodeExperts mode, const HostPathRates& r, const int32_t* tokens, int64_t n,
                             uint8_t* on_cpu, int32_t* order, bool probe_cpu, bool* probed, SplitRows rows) {
    BG_CHECK(n >= 0 && mode != DecodeExperts::kAuto);
    BG_CHECK(rows.step_rows == 0 || (rows.step_rows > 0 && rows.n_ff % rows.step_rows == 0));
    if (probed) *probed = false;
    HostSplit out;
    const uint8_t all = mode == DecodeExperts::kCpu ? 1 : 0;
    for (int64_t i = 0; i < n; ++i) on_cpu[i] = all;
    if (mode != DecodeExperts::kHybrid || n == 0) {
        out.on_cpu = all ? n : 0;
        return out;
    }

    // Fewest tokens first: the CPU's cost grows with an expert's tokens, a copy's does not.
    // Insertion sort, stable and without allocation (a decode step has k experts at most).
    for (int64_t i = 0; i < n; ++i) {
        int64_t j = i;
        for (; j > 0 && tokens[order[j - 1]] > tokens[i]; --j) order[j] = order[j - 1];
        order[j] = static_cast<int32_t>(i);
    }
    // c whole experts on the CPU (cpu_c their time), the rest copied.
    int64_t best_c = 0;
    double best = static_cast<double>(n) * r.copy_ms + r.gpu_ms, cpu_c = 0;
    for (int64_t c = 1; c <= n; ++c) {
        cpu_c += r.cpu_ms(tokens[order[c - 1]]);
        const double end = std::max(cpu_c, c < n ? static_cast<double>(n - c) * r.copy_ms + r.gpu_ms : 0.0);
        if (end < best) best = end, best_c = c;
    }
    // Or c whole and part of expert order[c]: its first q steps of rows on the CPU.
    const int64_t steps = rows.step_rows > 0 ? rows.n_ff / rows.step_rows : 0;
    if (steps >= 2 && r.part_copy_fixed >= 0) {
        double split_best = best - kSplitMinGainMs;
        cpu_c = 0;
        for (int64_t c = 0; c < n; ++c) {
            const double cpu_one = r.cpu_ms(tokens[order[c]]);
            const double copy_rest = static_cast<double>(n - c - 1) * r.copy_ms + r.gpu_ms;
            for (int64_t q = 1; q < steps; ++q) {
                const double f = static_cast<double>(q) / static_cast<double>(steps);  // the CPU's share
                const double end = std::max(cpu_c + f * cpu_one, copy_rest + r.part_copy_ms(1 - f));
                if (end < split_best) split_best = end, out.split = order[c], out.cpu_rows = q * rows.step_rows, best_c = c;
            }
            cpu_c += cpu_one;
        }
    }
    if (best_c == 0 && out.split < 0 && probe_cpu) {
        best_c = 1;
        if (probed) *probed = true;
    }
    for (int64_t c = 0; c < best_c; ++c) on_cpu[order[c]] = 1;
    out.on_cpu = best_c;
    return out;
}

}  // namespace bg
