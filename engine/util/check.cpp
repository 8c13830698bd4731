#include "util/check.h"

#include <cstdio>
#include <cstdlib>

namespace bg {

static std::string vstrf(const char* fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, ap2);
    va_end(ap2);
    std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, ap);
    return out;
}

std::string strf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrf(fmt, ap);
    va_end(ap);
    return s;
}

void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrf(fmt, ap);
    va_end(ap);
    throw Error(s);
}

void check_failed(const char* file, int line, const char* cond, const char* msg) {
    std::fprintf(stderr, "betelgeuse: invariant failed at %s:%d: %s%s%s\n", file, line, cond,
                 msg ? ": " : "", msg ? msg : "");
    std::fflush(stderr);
    std::abort();
}

}  // namespace bg
