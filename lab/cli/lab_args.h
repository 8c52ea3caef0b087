// Command-line helpers shared by the fragmentation-lab subcommands
// (lab_compare.cc, lab_min_memory.cc).
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

// Bytes from "123", or with a binary suffix "4KiB", "512MiB", "40GiB",
// "1TiB" (also K/M/G/T, KB/MB/GB/TB, all powers of 1024). Throws
// LabUsageError naming `flag` for anything else or on overflow.
inline size_t parse_lab_bytes(const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) throw LabUsageError(flag + " expects a byte count, got '" + text + "'");
  errno = 0;
  const unsigned long long n = std::strtoull(text.substr(0, digits).c_str(), nullptr, 10);
  if (errno == ERANGE) throw LabUsageError(flag + " value '" + text + "' is too large");
  const std::string suffix = text.substr(digits);
  int shift = -1;
  for (const auto& [names, bits] : {std::pair<const char*, int>{"", 0}, {"K", 10}, {"M", 20},
                                    {"G", 30}, {"T", 40}}) {
    const std::string s = names;
    if (suffix == s || (!s.empty() && (suffix == s + "iB" || suffix == s + "B"))) shift = bits;
  }
  if (shift < 0)
    throw LabUsageError(flag + " expects bytes such as 1073741824 or 1GiB, got '" + text + "'");
  if (shift > 0 && n > (~0ull >> shift))
    throw LabUsageError(flag + " value '" + text + "' is too large");
  return static_cast<size_t>(n << shift);
}

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
