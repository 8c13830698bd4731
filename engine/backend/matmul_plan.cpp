#include "backend/matmul_plan.h"

#include "util/check.h"

namespace bg {

MatmulMode parse_matmul_mode(const std::string& s) {
    if (s == "fast") return MatmulMode::kFast;
    if (s == "precise") return MatmulMode::kPrecise;
    fail("--matmul must be 'fast' or 'precise', got '%s'", s.c_str());
}

const char* matmul_mode_name(MatmulMode m) { return m == MatmulMode::kFast ? "fast" : "precise"; }

}  // namespace bg
