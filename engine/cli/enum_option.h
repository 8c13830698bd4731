// The flag that names one value of an enum (util/named_enum.h), spelled as the enum's table
// spells it (EnumNames<E>::kWhat, so errors and the CLI agree): CLI11 checks the word against the
// enum's names (so --help lists them and a wrong word is refused with the choices), and the
// config field receives the enum, parsed here once.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "util/named_enum.h"

namespace bg::cli {

template <class E>
CLI::Option* add_enum_option(CLI::App* cmd, E& field, const std::string& help) {
    std::vector<std::string> names;
    for (const NamedValue<E>& n : EnumNames<E>::kNames) names.emplace_back(n.name);
    CLI::Option* opt = cmd->add_option_function<std::string>(
        EnumNames<E>::kWhat, [&field](const std::string& s) { field = parse_enum<E>(s); }, help);
    opt->check(CLI::IsMember(names));
    opt->default_str(enum_name(field));
    return opt;
}

}  // namespace bg::cli
