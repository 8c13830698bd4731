// Enums that options name on the command line and in results files. Each has one table of its
// names (EnumNames<E>, specialised next to the enum), from which it is parsed at the edge (the
// CLI, a plan file), printed in start-up tables and metrics, and listed as the choices in --help
// and in errors; the engine past the edge holds only the enum.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "util/check.h"

namespace bg {

template <class E>
struct NamedValue {
    E value;
    const char* name;
};

// Specialise with: static constexpr NamedValue<E> kNames[] = {...}; static constexpr const char*
// kWhat = "--flag" (what an error names).
template <class E>
struct EnumNames;

template <class E>
const char* enum_name(E v) {
    for (const NamedValue<E>& n : EnumNames<E>::kNames)
        if (n.value == v) return n.name;
    BG_CHECK_MSG(false, "an enum value without a name");
    return "";
}

// "a | b | c", the names in table order.
template <class E>
std::string enum_choices() {
    std::string s;
    for (const NamedValue<E>& n : EnumNames<E>::kNames) s += (s.empty() ? "" : " | ") + std::string(n.name);
    return s;
}

// Whether s names a value; *out gets it.
template <class E>
bool try_parse_enum(std::string_view s, E* out) {
    for (const NamedValue<E>& n : EnumNames<E>::kNames)
        if (s == n.name) {
            *out = n.value;
            return true;
        }
    return false;
}

// Throws bg::Error naming the option and its choices when s names none.
template <class E>
E parse_enum(std::string_view s) {
    E v{};
    if (!try_parse_enum(s, &v))
        fail("%s must be one of %s, got '%.*s'", EnumNames<E>::kWhat, enum_choices<E>().c_str(), static_cast<int>(s.size()),
             s.data());
    return v;
}

}  // namespace bg
