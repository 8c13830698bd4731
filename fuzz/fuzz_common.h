// Checks shared by the fuzz targets: what a rejected input's error must look like.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bgfuzz {

// A finding that is not a sanitizer report: print it and abort, so libFuzzer (or the replay
// driver) records the input as a crash.
[[noreturn]] inline void finding(const char* what, const char* detail) {
    std::fprintf(stderr, "FUZZ FINDING: %s: %s\n", what, detail);
    std::abort();
}

// SPEC §6: a bad file gives a one-line error naming the problem, with its subsystem prefix.
inline void check_error_message(const char* msg, const char* prefix1, const char* prefix2 = nullptr) {
    static const bool verbose = std::getenv("BG_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "rejected: %s\n", msg);
    if (std::strchr(msg, '\n') || std::strchr(msg, '\r')) finding("error message is not one line", msg);
    const bool ok1 = std::strncmp(msg, prefix1, std::strlen(prefix1)) == 0;
    const bool ok2 = prefix2 && std::strncmp(msg, prefix2, std::strlen(prefix2)) == 0;
    if (!ok1 && !ok2) finding("error message lacks its subsystem prefix", msg);
}

}  // namespace bgfuzz
