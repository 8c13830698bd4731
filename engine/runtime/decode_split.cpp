#include "runtime/decode_split.h"

#include <algorithm>

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
            {"gpu_in_place_ms", gpu_in_place_ms}};
}

int64_t split_host_experts(DecodeExperts mode, const HostPathRates& r, const int32_t* tokens, int64_t n,
                           uint8_t* on_cpu, int32_t* order, bool probe_cpu, bool* probed) {
    BG_CHECK(n >= 0 && mode != DecodeExperts::kAuto);
    if (probed) *probed = false;
    const uint8_t all = mode == DecodeExperts::kCpu ? 1 : 0;
    for (int64_t i = 0; i < n; ++i) on_cpu[i] = all;
    if (mode != DecodeExperts::kHybrid || n == 0) return all ? n : 0;

    // Fewest tokens first: the CPU's cost grows with an expert's tokens, a copy's does not.
    // Insertion sort, stable and without allocation (a decode step has k experts at most).
    for (int64_t i = 0; i < n; ++i) {
        int64_t j = i;
        for (; j > 0 && tokens[order[j - 1]] > tokens[i]; --j) order[j] = order[j - 1];
        order[j] = static_cast<int32_t>(i);
    }
    double copy_all = 0;
    for (int64_t i = 0; i < n; ++i) copy_all += r.copy_ms;
    int64_t best_c = 0;
    double best = copy_all + r.gpu_ms, cpu = 0, copy = copy_all;
    for (int64_t c = 1; c <= n; ++c) {
        cpu += r.cpu_ms(tokens[order[c - 1]]);
        copy -= r.copy_ms;
        const double end = std::max(cpu, c < n ? copy + r.gpu_ms : 0.0);
        if (end < best) best = end, best_c = c;
    }
    if (best_c == 0 && probe_cpu) {
        best_c = 1;
        if (probed) *probed = true;
    }
    for (int64_t c = 0; c < best_c; ++c) on_cpu[order[c]] = 1;
    return best_c;
}

}  // namespace bg
