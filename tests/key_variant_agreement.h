// A backend's forward against the float64 reference on every key variant (tests/key_variants.h):
// logits within `tol` of the reference's (max relative difference per position) and the same 8
// greedy tokens. Used for the CUDA backend (test_gpu_reference) and its CPU emulation
// (test_emulated_gpu_numerics). Returns the worst difference seen.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // Session::run returns the metrics as json

#include "key_variants.h"
#include "reference/dsv41_reference.h"
#include "runtime/runner.h"
#include "runtime/session.h"

namespace bgtest {

inline double key_variants_against_reference(bg::DeviceFactory& device, double tol) {
    std::vector<KeyVariant> variants = key_variants();
    variants.insert(variants.begin(), {"base", [](GgufEdit&) {}});
    double worst_all = 0;
    for (const auto& v : variants) {
        SCOPED_TRACE(v.name);
        const std::string path = key_variant_path(v);
        const ref::Dsv41Reference ref(path);
        bg::RunConfig c;
        c.model_path = path;
        c.prompt_tokens = 24;
        c.prompt_seed = 5;
        c.gen = 8;
        c.routing = "exact";
        c.vram_budget_mib = 1024;
        bg::Session s(c, &device);
        const int64_t V = ref.hparams().n_vocab;
        const std::vector<int32_t> prompt = bg::random_prompt(24, 5, V, 0);
        const std::vector<float> got = s.all_logits(bg::RoutingPolicy::kExact);
        const auto want = ref.logits(prompt);
        EXPECT_EQ(got.size(), prompt.size() * static_cast<size_t>(V));
        if (got.size() != prompt.size() * static_cast<size_t>(V)) continue;
        const double worst = ref::max_rel_diff(want, got, V);
        worst_all = std::max(worst_all, worst);
        std::printf("  %-32s max rel diff %.3g (tolerance %.3g)\n", v.name.c_str(), worst, tol);
        EXPECT_LT(worst, tol);
        s.run(false);
        EXPECT_EQ(s.generated(), ref.greedy(prompt, 8));
    }
    return worst_all;
}

}  // namespace bgtest
