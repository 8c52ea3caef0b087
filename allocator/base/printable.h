// Input quoted in an error message, made safe to print.
#pragma once

#include <string>
#include <string_view>

namespace cachealloc {

// `text` with its control characters (bytes below 0x20, and 0x7f) written
// as \xNN, for an error message that quotes input: what() is a C string,
// so a NUL in the input would end the message there, and a newline would
// break its line. Other bytes (UTF-8 included) stay as they are.
std::string printable(std::string_view text);

}  // namespace cachealloc
