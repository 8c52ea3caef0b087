// One statistic as PyTorch's memory_stats reports it: current value, peak
// since the last peak reset, and totals added/removed since the last
// accumulated reset. Units are those of the family (bytes or counts).
//
// Invariants: peak >= current (until a peak reset sets peak = current);
// allocated - freed == current - (current at the last accumulated reset).
#pragma once

#include <algorithm>
#include <cstdint>

namespace cachealloc {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void increase(int64_t amount) {
    current += amount;
    peak = std::max(peak, current);
    allocated += amount;
  }
  void decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  // A signed change applied as native does: >0 increases, <0 decreases.
  void apply(int64_t change) {
    if (change > 0) increase(change);
    else if (change < 0) decrease(-change);
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = 0; freed = 0; }
};

}  // namespace cachealloc
