// Timestamps for history entries that cost a few cycles to take.
//
// Why: with history on, every allocate/free records 1-2 entries, and reading
// the system clock (clock_gettime through the vDSO, 20-70 ns on the GPU host
// and on VMs) for each was most of the cost of recording. As native PyTorch
// does (c10::ApproximateClock), entries store raw CPU ticks (the TSC on
// x86-64, steady_clock nanoseconds elsewhere) and are converted to Unix time
// only when the history is read.
//
// Conversion is linear between two (Unix ns, ticks) pairs: one taken when
// the clock is created, one when the history is read. Its error is the
// pairs' read skew (well under 1 µs each) scaled by how far an entry lies
// from the start; an invariant TSC (every x86-64 server CPU of the last
// decade) is assumed, as native does.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace cachealloc {

class TraceClock {
 public:
  // Now, in ticks (unit unspecified; only differences and convert() matter).
  static uint64_t ticks() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
#endif
  }

  // Calibration starts now.
  TraceClock() : start_(now_pair()) {}

  // Converts ticks read since construction to Unix microseconds. Create one
  // per read of the history (it takes the second calibration pair).
  class Converter {
   public:
    int64_t unix_us(uint64_t ticks) const {
      const double dt = static_cast<double>(static_cast<int64_t>(ticks - start_.ticks));
      return (start_.unix_ns + static_cast<int64_t>(dt * ns_per_tick_)) / 1000;
    }

   private:
    friend class TraceClock;
    struct Pair {
      int64_t unix_ns;
      uint64_t ticks;
    };
    Converter(Pair start, Pair end) : start_(start) {
      // Signed: a TSC read on another socket may be a little behind.
      const auto dticks = static_cast<double>(static_cast<int64_t>(end.ticks - start.ticks));
      // No ticks elapsed (or a clock that does not move): every entry is at
      // the start time.
      ns_per_tick_ = dticks > 0 ? static_cast<double>(end.unix_ns - start.unix_ns) / dticks : 0.0;
    }
    Pair start_;
    double ns_per_tick_ = 0.0;
  };
  Converter converter() const { return Converter(start_, now_pair()); }

 private:
  // One (Unix ns, ticks) pair; the ticks are the midpoint of two reads taken
  // around the system clock read, to halve the skew.
  static Converter::Pair now_pair() {
    const uint64_t before = ticks();
    const int64_t unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    const uint64_t after = ticks();
    return {unix_ns, before + (after - before) / 2};
  }

  Converter::Pair start_;
};

}  // namespace cachealloc
