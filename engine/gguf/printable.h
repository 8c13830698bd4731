// Names, keys and paths come from files and command lines: shown in a one-line error, anything
// that could break the line (control bytes, quotes, backslashes) is escaped and long ones are cut.
#pragma once

#include <string>

namespace bg::gguf {

std::string printable(const std::string& s);

}  // namespace bg::gguf
