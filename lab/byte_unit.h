// One unit for every size on a page or in a sentence (issue 24: reports
// mixed MiB and GiB): MiB below 2 GiB, GiB from there, picked once from
// the largest size shown.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace cachealloc {

struct ByteUnit {
  double bytes = 1 << 20;
  const char* name = "MiB";
};

inline ByteUnit unit_for(size_t largest) {
  if (largest >= (size_t{2} << 30)) return ByteUnit{double(size_t{1} << 30), "GiB"};
  return ByteUnit{};
}

// "1.26 GiB", "412.0 MiB", and below a tenth of the unit three
// significant digits ("0.00195 GiB" for 2 MiB), so no size reads as zero.
inline std::string in_unit(size_t bytes, const ByteUnit& unit) {
  const double v = static_cast<double>(bytes) / unit.bytes;
  char buf[48];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.1f %s" : v >= 0.1 || v == 0 ? "%.2f %s" : "%.3g %s", v,
                unit.name);
  return buf;
}

}  // namespace cachealloc
