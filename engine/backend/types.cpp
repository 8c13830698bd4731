#include "backend/types.h"

namespace bg {

RoutingPolicy parse_routing_policy(const std::string& s) {
    if (s == "exact") return RoutingPolicy::kExact;
    if (s == "pinned-top1") return RoutingPolicy::kPinnedTop1;
    if (s == "resident-only") return RoutingPolicy::kResidentOnly;
    if (s == "hot-pool") return RoutingPolicy::kHotPool;
    fail("--routing must be 'exact', 'pinned-top1', 'resident-only' or 'hot-pool', got '%s'", s.c_str());
}

const char* routing_policy_name(RoutingPolicy p) {
    switch (p) {
        case RoutingPolicy::kExact: return "exact";
        case RoutingPolicy::kPinnedTop1: return "pinned-top1";
        case RoutingPolicy::kResidentOnly: return "resident-only";
        case RoutingPolicy::kHotPool: return "hot-pool";
    }
    return "?";
}

}  // namespace bg
