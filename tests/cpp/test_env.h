// Numbers the tests read from the environment (seeds, iteration counts).
// A value that is not a plain decimal number fails the test that reads it,
// naming the variable: a typo must not run as seed 0 and pass as green.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace cachealloc {

// $name as a decimal uint64, or `fallback` when unset or empty. Throws
// std::invalid_argument naming `name` for anything else.
inline uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*v < '0' || *v > '9' || *end != '\0' || errno == ERANGE)
    throw std::invalid_argument(std::string(name) + "='" + v + "' is not a decimal number");
  return n;
}

}  // namespace cachealloc
