// --sm-limit: how many of a GPU's streaming multiprocessors (SMs) a run's work may use, and how a
// request becomes a count the GPU can actually partition. The CUDA backend enforces it with a
// green context (engine/cuda/sm_limit.cuh); this half is plain arithmetic, so it is unit-tested
// without a GPU.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace bg {

// A GPU splits its SMs into partitions of at least `min_count` SMs, in steps of `step` SMs.
struct SmPartitionRule {
    int min_count = 1;
    int step = 1;
};

// NVIDIA's guideline per compute capability (CUDA driver API, "Green Contexts"): 6.x and 7.x at
// least 2 SMs in multiples of 2; 8.x (the RTX 3060: sm_86) at least 4 in multiples of 2; 9.0 and
// later (the H200: sm_90) at least 8 in multiples of 8. The device reports its own rule
// (cuDeviceGetDevResource: minSmPartitionSize, smCoscheduledAlignment), which the backend prefers;
// this is the fallback where it reports none, and the rule the unit tests pin.
SmPartitionRule sm_partition_rule_for(int cc_major);

// The limit a run asked for and the one it got.
struct SmLimit {
    int requested = 0;  // --sm-limit; 0: no limit
    int used = 0;       // SMs the work may run on (all of the device's when not limited; 0: not a GPU)
    int total = 0;      // the device's SMs
    SmPartitionRule rule;
    std::string note;   // how `requested` became `used`, in words
    // Whether the work runs on fewer SMs than the device has (a green context holds them).
    bool partitioned() const { return used > 0 && used < total; }
    nlohmann::json to_json() const;
};

// The largest count <= requested that `rule` allows, at most `total`: 28 becomes 24 on a
// 132-SM sm_90 device (steps of 8) and stays 28 on sm_86 (steps of 2). requested <= 0 means no
// limit (used = total); requested >= total leaves the whole device (used = total, said in the
// note). Throws bg::Error when requested is below the rule's minimum partition.
SmLimit choose_sm_count(int requested, int total, SmPartitionRule rule);

}  // namespace bg
