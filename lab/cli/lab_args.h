// Command-line helpers shared by the fragmentation-lab subcommands
// (lab_compare.cc, lab_min_memory.cc) and replay (tools/).
#pragma once

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

namespace cachealloc {

// A usage error: the subcommand prints its usage text and exits with 2.
struct LabUsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A count of things: decimal digits only. Throws LabUsageError naming
// `flag` for anything else or on overflow. (Byte counts: command_line.h.)
inline size_t parse_lab_count(const std::string& flag, const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw LabUsageError(flag + " expects a number, got '" + text + "'");
  errno = 0;
  const unsigned long long n = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) throw LabUsageError(flag + " value '" + text + "' is too large");
  return static_cast<size_t>(n);
}

// A device index: a count that fits in int (devices are ints everywhere
// else). Throws LabUsageError naming `flag` for anything larger, rather
// than wrapping (4294967296 would otherwise become device 0).
inline int parse_lab_device(const std::string& flag, const std::string& text) {
  const size_t n = parse_lab_count(flag, text);
  if (n > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw LabUsageError(flag + " value '" + text + "' is out of range (0 to " +
                        std::to_string(std::numeric_limits<int>::max()) + ")");
  return static_cast<int>(n);
}

}  // namespace cachealloc
