// Invariant checks and operating errors.
//
// Two kinds of failure, kept apart on purpose:
//  - a broken invariant (a bug in this program) aborts at once with file and line: BG_CHECK;
//  - an operating error (bad input file, I/O failure, budget too small, bad flag) is thrown as
//    bg::Error with one clear line; the command-line front end prints it and exits non-zero.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace bg {

struct Error : std::runtime_error {
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// printf-style formatting into a std::string (gcc 12 has no <format>).
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg);

}  // namespace bg

#define BG_CHECK(cond)                                                                \
    do {                                                                              \
        if (__builtin_expect(!(cond), 0)) ::bg::check_failed(__FILE__, __LINE__, #cond, nullptr); \
    } while (0)

#define BG_CHECK_MSG(cond, msg)                                                       \
    do {                                                                              \
        if (__builtin_expect(!(cond), 0)) ::bg::check_failed(__FILE__, __LINE__, #cond, (msg)); \
    } while (0)
