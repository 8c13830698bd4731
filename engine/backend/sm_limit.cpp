#include "backend/sm_limit.h"

#include <algorithm>

#include "util/check.h"

namespace bg {

SmPartitionRule sm_partition_rule_for(int cc_major) {
    if (cc_major >= 9) return {8, 8};
    if (cc_major == 8) return {4, 2};
    return {2, 2};
}

nlohmann::json SmLimit::to_json() const {
    return {{"requested", requested}, {"used", used},         {"total", total},
            {"min_count", rule.min_count}, {"step", rule.step}, {"partitioned", partitioned()},
            {"note", note}};
}

SmLimit choose_sm_count(int requested, int total, SmPartitionRule rule) {
    BG_CHECK(total > 0 && rule.min_count > 0 && rule.step > 0);
    SmLimit s;
    s.requested = std::max(requested, 0);
    s.total = total;
    s.rule = rule;
    if (requested <= 0) {
        s.used = total;
        s.note = strf("no limit: all %d SMs", total);
        return s;
    }
    if (requested >= total) {
        s.used = total;
        s.note = strf("--sm-limit %d: the GPU has %d SMs, so the limit changes nothing (all %d used)", requested, total, total);
        return s;
    }
    if (requested < rule.min_count)
        fail("--sm-limit %d: this GPU partitions its SMs in groups of at least %d (in steps of %d); give %d or more, or 0 "
             "for no limit",
             requested, rule.min_count, rule.step, rule.min_count);
    s.used = requested / rule.step * rule.step;
    BG_CHECK(s.used >= rule.min_count);
    s.note = s.used == requested
                 ? strf("--sm-limit %d: %d of the GPU's %d SMs", requested, s.used, total)
                 : strf("--sm-limit %d: %d of the GPU's %d SMs, the largest count <= %d this GPU can partition (at least %d, "
                        "in steps of %d)",
                        requested, s.used, total, requested, rule.min_count, rule.step);
    return s;
}

}  // namespace bg
