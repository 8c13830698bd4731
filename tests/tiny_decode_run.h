// A run of the tiny model whose decode uses host-resident experts (8 resident slots a layer, 2
// of them hot in VRAM, 4 transient slots), after a cold and a warm pass over a 24-token prompt:
// the tests of where those experts are computed (--decode-experts) and of what the forward
// queues around them.
#pragma once

#include <cstdint>

#include "model_fixture.h"
#include "runtime/run_config.h"

namespace bgtest {

inline bg::RunConfig tiny_decode_run(bg::DecodeExperts mode, bg::RoutingPolicy routing, int64_t gen) {
    bg::RunConfig c;
    c.model_path = tiny_model();
    c.prompt_tokens = 24;
    c.prompt_seed = 3;
    c.gen = gen;
    c.ignore_eos = true;
    c.slots = 8;
    c.hot = 2;
    c.transient_slots = 4;
    c.threads = 2;
    c.passes = 2;
    c.routing = routing;
    c.decode_experts = mode;
    return c;
}

}  // namespace bgtest
