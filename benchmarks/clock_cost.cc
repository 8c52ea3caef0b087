// What a timestamp costs on this CPU, for each clock a history entry could
// be stamped with. Not a Google Benchmark: a plain program, so that it runs
// anywhere the binary is copied (the GPU host has no Google Benchmark).
//
//   clock_cost [ROUNDS]
//
// For each source it prints ns per read in two settings, minimum and median
// over ROUNDS (default 7) interleaved rounds:
//   alone    reads back to back (throughput of the read itself);
//   in work  one read per step of a loop that does what a recorded
//            allocation does around its clock read: some dependent integer
//            work and a 40-byte record written into a 4 MB ring. The figure
//            is the step's time minus the same step with no read, so it is
//            what the read adds where a recorder would make it.
// Sources: history's own clock (TraceClock::ticks, rdtsc on x86-64), rdtscp, clock_gettime with
// CLOCK_MONOTONIC and CLOCK_MONOTONIC_COARSE (vDSO), and a relaxed load of a
// value a background thread refreshes every 100 µs ("ticker"). The coarse
// clock's and the ticker's resolutions are printed too: they are cheap only
// because they are coarse.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "stats/trace_clock.h"

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_ticker{0};
std::atomic<bool> g_ticker_stop{false};
constexpr auto kTickerPeriod = std::chrono::microseconds(100);

uint64_t tscp() {
#if defined(__x86_64__)
  unsigned aux;
  return __rdtscp(&aux);
#else
  return 0;
#endif
}

uint64_t gettime(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

enum class Source { kNone, kTraceClock, kRdtscp, kMonotonic, kMonotonicCoarse, kTicker };
const char* name(Source s) {
  switch (s) {
    case Source::kNone: return "none";
    case Source::kTraceClock: return "rdtsc (TraceClock)";
    case Source::kRdtscp: return "rdtscp";
    case Source::kMonotonic: return "CLOCK_MONOTONIC";
    case Source::kMonotonicCoarse: return "CLOCK_MONOTONIC_COARSE";
    case Source::kTicker: return "ticker (100 us)";
  }
  return "?";
}

template <Source S>
inline uint64_t read_clock() {
  if constexpr (S == Source::kNone) return 0;
  if constexpr (S == Source::kTraceClock) return cachealloc::TraceClock::ticks();
  if constexpr (S == Source::kRdtscp) return tscp();
  if constexpr (S == Source::kMonotonic) return gettime(CLOCK_MONOTONIC);
  if constexpr (S == Source::kMonotonicCoarse) return gettime(CLOCK_MONOTONIC_COARSE);
  if constexpr (S == Source::kTicker) return g_ticker.load(std::memory_order_relaxed);
}

// A ring record as history.h lays it out: 40 bytes.
struct Record {
  int64_t time;
  uint64_t address;
  uint64_t size;
  uint64_t stream;
  int32_t device;
  uint8_t action, entries, has_context, pad;
};
static_assert(sizeof(Record) == 40);

constexpr size_t kRing = 100000;  // records: 4 MB, beyond L2
std::vector<Record> g_ring(kRing);
volatile uint64_t g_sink;

// ns per read, back to back.
template <Source S>
double alone(long n) {
  uint64_t acc = 0;
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) acc += read_clock<S>();
  const auto t1 = Clock::now();
  g_sink = acc;
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

// ns per step of: dependent integer work (a few dozen instructions, like
// the engine's rounding and bookkeeping) and one ring record stamped with
// the source's read.
template <Source S>
double in_work(long n) {
  uint64_t x = 0x9e3779b97f4a7c15u;
  size_t next = 0;
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    for (int k = 0; k < 8; ++k) {  // ~40 dependent ALU ops
      x ^= x >> 13;
      x *= 0xff51afd7ed558ccdu;
      x += static_cast<uint64_t>(k);
    }
    Record& r = g_ring[next];
    next = next + 1 == kRing ? 0 : next + 1;
    r.time = static_cast<int64_t>(read_clock<S>());
    r.address = x;
    r.size = static_cast<uint64_t>(i);
    r.stream = 0;
    r.device = 0;
    r.action = 1;
    r.entries = 1;
  }
  const auto t1 = Clock::now();
  g_sink = x;
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

struct Row {
  Source source;
  double (*alone)(long);
  double (*in_work)(long);
  std::vector<double> alone_ns, work_ns;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// The kernel's stated resolution of a clock, in ns (4,000,000 for the
// coarse clocks on a 250 Hz kernel).
double resolution_ns(clockid_t id) {
  timespec res;
  clock_getres(id, &res);
  return static_cast<double>(res.tv_sec) * 1e9 + static_cast<double>(res.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  if (rounds < 1) {
    std::fprintf(stderr, "usage: clock_cost [ROUNDS >= 1]\n");
    return 2;
  }
  std::thread ticker([] {
    while (!g_ticker_stop.load(std::memory_order_relaxed)) {
      g_ticker.store(cachealloc::TraceClock::ticks(), std::memory_order_relaxed);
      std::this_thread::sleep_for(kTickerPeriod);
    }
  });
  std::vector<Row> rows = {
      {Source::kNone, alone<Source::kNone>, in_work<Source::kNone>, {}, {}},
      {Source::kTraceClock, alone<Source::kTraceClock>, in_work<Source::kTraceClock>, {}, {}},
      {Source::kRdtscp, alone<Source::kRdtscp>, in_work<Source::kRdtscp>, {}, {}},
      {Source::kMonotonic, alone<Source::kMonotonic>, in_work<Source::kMonotonic>, {}, {}},
      {Source::kMonotonicCoarse, alone<Source::kMonotonicCoarse>,
       in_work<Source::kMonotonicCoarse>, {}, {}},
      {Source::kTicker, alone<Source::kTicker>, in_work<Source::kTicker>, {}, {}},
  };
  constexpr long kReads = 5000000;
  for (auto& r : rows) r.in_work(kReads / 5);  // warm the ring and the code
  for (int round = 0; round < rounds; ++round)
    for (auto& r : rows) {
      r.alone_ns.push_back(r.alone(kReads));
      r.work_ns.push_back(r.in_work(kReads));
    }
  g_ticker_stop = true;
  ticker.join();

  // Step time minus the no-read step, round by round.
  const Row& base = rows[0];
  std::printf("%-24s %18s %26s\n", "source", "alone ns (min/med)", "added in work ns (min/med)");
  for (const auto& r : rows) {
    std::vector<double> added;
    for (int i = 0; i < rounds; ++i) added.push_back(r.work_ns[i] - base.work_ns[i]);
    std::printf("%-24s %8.1f / %-8.1f %12.1f / %-8.1f\n", name(r.source), minimum(r.alone_ns),
                median(r.alone_ns), minimum(added), median(added));
  }
  std::printf("work step with no read: %.1f ns (median)\n", median(base.work_ns));
  std::printf("resolution: CLOCK_MONOTONIC %.0f ns, CLOCK_MONOTONIC_COARSE %.0f ns, ticker %lld us\n",
              resolution_ns(CLOCK_MONOTONIC), resolution_ns(CLOCK_MONOTONIC_COARSE),
              static_cast<long long>(kTickerPeriod.count()));
  return 0;
}
