#include "pickle/byte_size.h"

#include <algorithm>
#include <cctype>
#include <cstddef>

namespace cachealloc {
namespace {

using u128 = unsigned __int128;

// Significant digits kept exactly; 10^30 * 2^40 still fits in 128 bits,
// and no byte count that fits in 64 bits needs more.
constexpr int kMaxDigits = 30;
constexpr int kMaxDecimalExponent = 30;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

u128 pow10(int n) {
  u128 v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}

// log2 of the unit's multiple, or -1 for no unit this grammar knows.
int unit_shift(std::string_view unit) {
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.empty() || u == "b") return 0;
  const std::string_view prefixes = "kmgt";
  const size_t p = prefixes.find(u[0]);
  if (p == std::string_view::npos) return -1;
  const std::string_view rest = std::string_view(u).substr(1);
  if (rest.empty() || rest == "b" || rest == "ib") return 10 * static_cast<int>(p + 1);
  return -1;
}

}  // namespace

std::optional<uint64_t> parse_byte_size(std::string_view text, std::string& problem) {
  size_t i = 0;
  u128 mantissa = 0;
  int digits = 0;      // significant digits in `mantissa`
  int exponent = 0;    // decimal exponent applied to `mantissa`
  bool any_digit = false;
  const auto take_digit = [&](char c) {
    any_digit = true;
    if (mantissa == 0 && c == '0') return true;  // leading zeros carry nothing
    if (++digits > kMaxDigits) return false;
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    return true;
  };
  for (; i < text.size() && is_digit(text[i]); ++i)
    if (!take_digit(text[i])) return problem = "has too many digits", std::nullopt;
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && is_digit(text[i]); ++i) {
      if (!take_digit(text[i])) return problem = "has too many digits", std::nullopt;
      --exponent;
    }
  }
  if (!any_digit) return problem = "is not a byte count", std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E') && i + 1 < text.size() &&
      (is_digit(text[i + 1]) || text[i + 1] == '+' || text[i + 1] == '-')) {
    ++i;
    const bool negative = text[i] == '-';
    if (text[i] == '+' || text[i] == '-') ++i;
    if (i >= text.size() || !is_digit(text[i])) return problem = "is not a byte count", std::nullopt;
    int e = 0;
    for (; i < text.size() && is_digit(text[i]); ++i)
      e = std::min(e * 10 + (text[i] - '0'), 1000);  // saturate: 1e999999 is just too large
    exponent += negative ? -e : e;
  }
  if (i < text.size() && text[i] == ' ') ++i;
  const int shift = unit_shift(text.substr(i));
  if (shift < 0) return problem = "has an unknown unit (use K, M, G or T, with B or iB)", std::nullopt;

  if (mantissa == 0) return 0;
  if (exponent > kMaxDecimalExponent) return problem = "is too large", std::nullopt;
  if (exponent < -kMaxDigits - 1) return 0;  // below one byte: rounds down to 0
  // mantissa < 10^30 and shift <= 40, so mantissa << shift fits in 128 bits.
  u128 value = mantissa << shift;
  const u128 limit = u128{UINT64_MAX};
  if (exponent >= 0) {
    for (int k = 0; k < exponent; ++k) {
      value *= 10;
      if (value > limit) return problem = "is too large", std::nullopt;
    }
  } else {
    value /= pow10(-exponent);  // rounds down to a whole byte
  }
  if (value > limit) return problem = "is too large", std::nullopt;
  return static_cast<uint64_t>(value);
}

}  // namespace cachealloc
