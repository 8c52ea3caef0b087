// The whole front under threads: C API -> runtime -> per-device engine ->
// observers (stats, history, scopes), on the simulated backend with 2 and
// 4 devices. 8-16 threads allocate and free (on their own device and on
// others, with device -1 too), hand blocks to each other to free, call
// record_stream, read stats, take snapshots, empty the cache, toggle
// history, route mallocs to private pools and turn expandable segments on
// and off. The fault variants add, at random points: the device refusing
// memory, a VMM map failing part way, and host memory running out
// (std::bad_alloc from this program's operator new) inside the pointer
// table, the history or anywhere else a call allocates.
//
// Every failure must be a named error (an OOM, "out of host memory", the
// injected driver error), and a call that fails must have changed nothing
// the caller can see: a free that reports an error leaves its block
// allocated and known. At the end every block is freed, the cache emptied,
// and then every device shows 0 bytes allocated and reserved, no segment,
// no mapped page, and its invariants hold. One host-fault run has a single
// thread arm a fault in one call of three and checks every device's
// invariants and every held block after each step, so a hole shows at the
// call that made it.
//
// Seeded and bounded in time: CACHEALLOC_STRESS_SEED (default 1),
// CACHEALLOC_STRESS_MS per test (default 1500; the checked-every-step run
// takes a third of it), CACHEALLOC_STRESS_THREADS (default: each test's
// own count) for runs with other thread counts. Built also under
// ThreadSanitizer in CI (scripts/sanitize_ci.sh).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "allocator/sim/simulated_device.h"
#include "bindings/c_api/c_api_internal.h"
#include "bindings/c_api/cachealloc.h"
#include "bindings/runtime/runtime.h"
#include "gtest/gtest.h"
#include "tests/cpp/test_env.h"

// Host-memory fault injection, per thread: when armed with n > 0, the n-th
// allocation this thread makes from now on throws std::bad_alloc (and
// t_fired says so). Thread-local so that only the armed call fails.
namespace {
thread_local int t_fail_countdown = 0;
thread_local bool t_fired = false;
}  // namespace

void* operator new(std::size_t n) {
  if (t_fail_countdown > 0 && --t_fail_countdown == 0) {
    t_fired = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// (Pairs with the malloc above; GCC cannot see that.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace cachealloc {
namespace {

struct StressConfig {
  int devices = 2;
  int threads = 8;
  bool faults = false;      // device refusals and VMM failures
  bool host_faults = false; // std::bad_alloc inside calls
  int arm_one_in = 40;      // host faults: calls armed, one in this many
  bool check_each_step = false;  // invariants and held blocks after each step
};

struct Held {
  void* ptr;
  int device;
};

// What all threads share: blocks handed from one thread to another and
// error counts by name.
struct Shared {
  std::mutex mailbox_mutex;
  std::vector<Held> mailbox;
  std::mutex errors_mutex;
  std::map<std::string, int> errors;    // category -> count
  std::vector<std::string> unexpected;  // messages of no known kind
  std::atomic<uint64_t> ops{0};
};

// The runtime's simulated device `d` (current generation). Its failure
// injection is not thread-safe: call only under the device's lock.
SimulatedDevice& sim(int d) {
  auto* s = dynamic_cast<SimulatedDevice*>(
      Runtime::instance().current().backends[static_cast<size_t>(d)].get());
  if (!s) throw std::logic_error("not a simulated device");
  return *s;
}

void check_device(int d) {
  Runtime::instance().current().allocator.with_device(d, [&](DeviceCachingAllocator& e) {
    e.check_invariants();
    sim(d).check();
  });
}

// Sorts a failed call's message into a named kind, or keeps it as unexpected.
void classify(Shared& sh, int status, const std::string& what) {
  const char* msg = cachealloc_last_error();
  std::string m = msg ? msg : "";
  std::string kind;
  if (status == 1 && m.find("out of memory") != std::string::npos) kind = "oom";
  else if (m.find("out of host memory") != std::string::npos) kind = "host oom";
  // (The message when host memory ran out while the error was reported.)
  else if (m == "no host memory") kind = "host oom";
  else if (m.find("injected driver error") != std::string::npos) kind = "driver error";
  else if (m.find("CUDA out of memory") != std::string::npos) kind = "oom";
  std::lock_guard<std::mutex> lock(sh.errors_mutex);
  if (kind.empty()) sh.unexpected.push_back(what + " (status " + std::to_string(status) + "): " + m);
  else ++sh.errors[kind];
}

class Worker {
 public:
  Worker(Shared& sh, const StressConfig& c, int id, uint64_t seed)
      : sh_(sh), c_(c), id_(id), rng_(seed * 1000003 + static_cast<uint64_t>(id)),
        home_(id % c.devices), stream_(reinterpret_cast<void*>(uintptr_t(1 + id % 4))) {}

  // Steps until `until`, and at least `min_steps` (a loaded machine must
  // not leave the checked run too short to reach its paths).
  void run(std::chrono::steady_clock::time_point until, uint64_t min_steps) {
    uint64_t steps = 0;
    while (std::chrono::steady_clock::now() < until || steps < min_steps) {
      for (int i = 0; i < 64; ++i, ++steps) {
        step();
        if (c_.check_each_step && !checked_after(i)) return;
      }
    }
  }

  // Frees everything this thread holds and drops its pool uses.
  void finish() {
    for (const Held& h : held_) cachealloc_free(h.ptr, 0, h.device, nullptr);
    held_.clear();
    for (int d : pools_) EXPECT_EQ(cachealloc_pool_release(d, kPoolFirst, pool_second()), 0)
        << cachealloc_last_error();
    pools_.clear();
  }

 private:
  static constexpr uint64_t kPoolFirst = 0x57e55;

  // check_each_step: every device's invariants hold and every block this
  // thread holds is known, with its device. False (and a failure naming the
  // step) if not.
  bool checked_after(int step_in_batch) {
    const std::string where = "thread " + std::to_string(id_) + ", step " +
                              std::to_string(step_in_batch) + " of a batch, last call " +
                              last_call_ + (t_fired ? " (a host fault fired in it)" : "");
    for (int d = 0; d < c_.devices; ++d) {
      try {
        check_device(d);
      } catch (const std::exception& e) {
        ADD_FAILURE() << where << ": device " << d << ": " << e.what();
        return false;
      }
    }
    for (const Held& h : held_) {
      size_t size = 0;
      int dev = -1;
      if (cachealloc_block_info(h.ptr, &size, &dev) != 0 || dev != h.device) {
        ADD_FAILURE() << where << ": a held block is unknown or moved: "
                      << cachealloc_last_error();
        return false;
      }
    }
    return true;
  }
  uint64_t pool_second() const { return static_cast<uint64_t>(id_) + 1; }

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  int any_device() { return pick(4) == 0 ? pick(c_.devices) : home_; }
  size_t any_size() {
    switch (pick(4)) {
      case 0: return 1 + rng_() % 4096;              // small pool, tiny
      case 1: return 4096 + rng_() % (1 << 20);      // small pool
      case 2: return (1 << 20) + rng_() % (8 << 20); // large pool
      default: return (8 << 20) + rng_() % (40 << 20);
    }
  }

  // Arms a host-memory failure for the next call, in fault runs, rarely.
  void maybe_arm() {
    t_fired = false;
    if (c_.host_faults && pick(40) == 0) t_fail_countdown = 1 + pick(6);
  }
  void disarm() { t_fail_countdown = 0; }

  void malloc_on(int device) {
    void* p = nullptr;
    last_call_ = "malloc";
    maybe_arm();
    const int s = cachealloc_try_malloc(static_cast<ssize_t>(any_size()), device,
                                        pick(3) ? stream_ : nullptr, &p);
    disarm();
    if (s == 0) held_.push_back({p, device});
    else classify(sh_, s, "malloc");
  }

  void free_one(const Held& h) {
    const int device = pick(2) ? -1 : h.device;
    last_call_ = "free";
    if (!c_.faults) {
      cachealloc_free(h.ptr, 0, device, nullptr);
      return;
    }
    // A free returns nothing: its error, if any, is the thread's last one.
    c_api::last_error.clear();
    maybe_arm();
    cachealloc_free(h.ptr, 0, device, nullptr);
    disarm();
    if (c_api::last_error.empty()) {
      // Done (a fault that fired was absorbed: an observer dropped an event).
      if (t_fired) count("host oom absorbed by a free");
      return;
    }
    // The free failed: it must have changed nothing. The block is still
    // this thread's (no other thread can have been handed its address),
    // allocated and known on its device: free it again later.
    classify(sh_, -1, "free");
    size_t size = 0;
    int dev = -1;
    EXPECT_EQ(cachealloc_block_info(h.ptr, &size, &dev), 0)
        << "a failed free lost its block: " << cachealloc_last_error();
    EXPECT_EQ(dev, h.device);
    held_.push_back(h);
    count("host oom in free (block kept)");
  }

  void count(const char* what) {
    std::lock_guard<std::mutex> lock(sh_.errors_mutex);
    ++sh_.errors[what];
  }

  Held take_held() {
    const size_t i = rng_() % held_.size();
    Held h = held_[i];
    held_[i] = held_.back();
    held_.pop_back();
    return h;
  }

  void pool_mallocs() {
    const int d = home_;
    if (std::find(pools_.begin(), pools_.end(), d) == pools_.end()) {
      ASSERT_EQ(cachealloc_pool_create_or_incref(d, kPoolFirst, pool_second()), 0)
          << cachealloc_last_error();
      pools_.push_back(d);
    }
    ASSERT_EQ(cachealloc_pool_begin_allocate(d, kPoolFirst, pool_second(), nullptr, nullptr,
                                             nullptr), 0)
        << cachealloc_last_error();
    for (int n = 1 + pick(4); n > 0; --n) malloc_on(d);
    ASSERT_EQ(cachealloc_pool_end_allocate(d, kPoolFirst, pool_second()), 0)
        << cachealloc_last_error();
    // A route adds a use that outlives it (as native's use_mem_pool, which
    // releases it after ending the route).
    ASSERT_EQ(cachealloc_pool_release(d, kPoolFirst, pool_second()), 0) << cachealloc_last_error();
    if (pick(4) == 0) cachealloc_empty_cache_pool(d, kPoolFirst, pool_second());
  }

  void inject_device_fault() {
    const int d = pick(c_.devices);
    const int kind = pick(3);
    Runtime::instance().current().allocator.with_device(d, [&](DeviceCachingAllocator&) {
      SimulatedDevice& s = sim(d);
      if (kind == 0) s.refuse_next_allocations(1 + pick(2));
      else if (kind == 1) s.refuse_page_of_next_map(static_cast<size_t>(pick(4)));
      else s.fail_page_of_next_map(static_cast<size_t>(pick(4)));
    });
  }

  void step() {
    sh_.ops.fetch_add(1, std::memory_order_relaxed);
    last_call_ = "another call";
    const int r = pick(1000);
    if (r < 330) {
      if (held_.size() < 48) malloc_on(any_device());
    } else if (r < 620) {
      if (!held_.empty()) free_one(take_held());
    } else if (r < 690) {
      // Hand a block to whichever thread takes it next.
      if (!held_.empty()) {
        Held h = take_held();
        std::lock_guard<std::mutex> lock(sh_.mailbox_mutex);
        sh_.mailbox.push_back(h);
      }
    } else if (r < 760) {
      // Free a block another thread allocated.
      Held h{nullptr, 0};
      {
        std::lock_guard<std::mutex> lock(sh_.mailbox_mutex);
        if (!sh_.mailbox.empty()) {
          h = sh_.mailbox.back();
          sh_.mailbox.pop_back();
        }
      }
      if (h.ptr) free_one(h);
    } else if (r < 800) {
      if (!held_.empty()) {
        const Held& h = held_[rng_() % held_.size()];
        EXPECT_EQ(cachealloc_record_stream(h.ptr, reinterpret_cast<void*>(uintptr_t(1 + pick(4)))), 0)
            << cachealloc_last_error();
      }
    } else if (r < 850) {
      std::vector<int64_t> stats(static_cast<size_t>(cachealloc_stat_count()));
      EXPECT_EQ(cachealloc_memory_stats(any_device(), stats.data(), static_cast<int>(stats.size())), 0);
      int64_t a = 0, res = 0;
      EXPECT_EQ(cachealloc_usage(any_device(), &a, &res), 0);
      EXPECT_LE(a, res);
    } else if (r < 870) {
      cachealloc_current_bytes cb;
      const int d = any_device();
      uint64_t scope = 0;
      EXPECT_EQ(cachealloc_current_bytes_of(d, &cb), 0);
      // Scopes nest per device across threads; another thread's may be
      // innermost, so a close may be refused (a named ScopeError).
      if (cachealloc_scope_open(d, &scope) == 0) {
        malloc_on(d);
        while (cachealloc_scope_close(d, scope, nullptr) != 0) std::this_thread::yield();
      }
    } else if (r < 880) {
      char* buf = nullptr;
      size_t len = 0;
      last_call_ = "snapshot";
      maybe_arm();
      const int s = cachealloc_snapshot_pickle(&buf, &len);
      disarm();
      if (s == 0) cachealloc_release_buffer(buf);
      else classify(sh_, s, "snapshot");
    } else if (r < 890) {
      EXPECT_EQ(cachealloc_empty_cache(pick(3) ? any_device() : -1), 0) << cachealloc_last_error();
    } else if (r < 900 && pick(2)) {
      last_call_ = "record_history";
      maybe_arm();
      const int s = cachealloc_record_history(pick(2), pick(4), 0, 1 + rng_() % 4000);
      disarm();
      if (s != 0) classify(sh_, s, "record_history");
    } else if (r < 900) {
      // The OOM recorder's request ring: resized, turned off and on, read.
      // Its ring is allocated when made, so recording never allocates: a
      // host fault can fail only these calls, and then changes nothing.
      last_call_ = "request ring";
      maybe_arm();
      const int s = c_api::guarded([&] {
        if (pick(3) == 0) Runtime::instance().record_requests(pick(3) ? 1 + rng_() % 3000 : 0);
        for (const Runtime::RequestRingView& ring : Runtime::instance().request_rings())
          if (ring.entries.size() > 2 * 3000) throw std::logic_error("a ring outgrew its bound");
        if (Runtime::instance().request_records() > 3000)
          throw std::logic_error("the ring's setting is not one asked for");
      });
      disarm();
      if (s != 0) classify(sh_, s, "request ring");
    } else if (r < 915) {
      pool_mallocs();
    } else if (r < 920) {
      EXPECT_EQ(cachealloc_set_allocator_settings(pick(2) ? "expandable_segments:True"
                                                          : "expandable_segments:False"),
                0)
          << cachealloc_last_error();
    } else if (r < 930) {
      try {
        check_device(pick(c_.devices));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << id_ << ": " << e.what();
      }
    } else if (r < 940) {
      if (c_.faults) inject_device_fault();
    } else {
      if (held_.size() < 48) malloc_on(home_);
    }
  }

  Shared& sh_;
  const StressConfig c_;
  const int id_;
  std::mt19937_64 rng_;
  const int home_;
  void* const stream_;
  std::vector<Held> held_;
  std::vector<int> pools_;  // devices where this thread's pool was created
  const char* last_call_ = "";  // the kind of the last call armed, for messages
};

// Runs one configuration to the end and checks that every byte came back.
void stress(StressConfig c) {
  const uint64_t seed = env_u64("CACHEALLOC_STRESS_SEED", 1);
  uint64_t ms = env_u64("CACHEALLOC_STRESS_MS", 1500);
  // A run checked after every step is slower per step; a third of the time
  // still makes tens of thousands of them.
  if (c.check_each_step) ms /= 3;
  if (c.threads > 1)
    c.threads = static_cast<int>(env_u64("CACHEALLOC_STRESS_THREADS", static_cast<uint64_t>(c.threads)));
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(c.threads) +
               " threads, " + std::to_string(c.devices) + " devices" +
               (c.faults ? ", faults" : ""));
  // 6 GiB a device: the threads' blocks (up to 48 x 48 MiB each) overfill
  // it, so OOMs and the free-and-retry path are part of the mix.
  const std::string backend = "simulated:6442450944:" + std::to_string(c.devices);
  ASSERT_EQ(cachealloc_init("", backend.c_str()), 0) << cachealloc_last_error();
  Runtime::instance().record_requests(2000);  // the workers toggle it too
  Shared sh;
  std::vector<Worker> workers;
  workers.reserve(static_cast<size_t>(c.threads));
  for (int i = 0; i < c.threads; ++i) workers.emplace_back(sh, c, i, seed);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  std::vector<std::thread> threads;
  // The checked run: at least 8000 steps (about 0.3 s; a host fault fires
  // in about one step of a thousand).
  const uint64_t min_steps = c.check_each_step ? 8000 : 0;
  for (auto& w : workers) threads.emplace_back([&w, until, min_steps] { w.run(until, min_steps); });
  for (auto& t : threads) t.join();

  // The end: every block freed (those handed over and never taken too),
  // faults cleared, history off, the cache emptied.
  for (const Held& h : sh.mailbox) cachealloc_free(h.ptr, 0, -1, nullptr);
  for (auto& w : workers) w.finish();
  ASSERT_EQ(cachealloc_record_history(0, 0, 0, 1), 0);
  Runtime::instance().record_requests(0);
  for (int d = 0; d < c.devices; ++d) {
    Runtime::instance().current().allocator.with_device(d, [&](DeviceCachingAllocator&) {
      SimulatedDevice& s = sim(d);
      s.refuse_next_allocations(0);
      s.refuse_page_of_next_map(SimulatedMemory::kNoPageLimit);
      s.fail_page_of_next_map(SimulatedMemory::kNoPageLimit);
    });
  }
  ASSERT_EQ(cachealloc_empty_cache(-1), 0) << cachealloc_last_error();
  for (int d = 0; d < c.devices; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    int64_t allocated = -1, reserved = -1;
    ASSERT_EQ(cachealloc_usage(d, &allocated, &reserved), 0);
    EXPECT_EQ(allocated, 0);
    EXPECT_EQ(reserved, 0);
    cachealloc_current_bytes cb;
    ASSERT_EQ(cachealloc_current_bytes_of(d, &cb), 0);
    EXPECT_EQ(cb.active, 0);
    EXPECT_EQ(cb.inactive_split, 0);
    check_device(d);
    Runtime::instance().current().allocator.with_device(d, [&](DeviceCachingAllocator&) {
      EXPECT_EQ(sim(d).used_bytes(), 0u);
      EXPECT_EQ(sim(d).live_segments(), 0u);
      EXPECT_EQ(sim(d).mapped_pages(), 0u);
    });
  }
  // Every failure was one of the named kinds.
  for (const auto& m : sh.unexpected) ADD_FAILURE() << "unnamed error: " << m;
  std::string seen;
  for (const auto& [k, n] : sh.errors) seen += " " + k + "=" + std::to_string(n);
  std::printf("[stress] %d threads, %d devices%s, seed %llu: %llu operations in %llu ms;%s\n",
              c.threads, c.devices, c.faults ? ", faults" : "",
              static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(sh.ops.load()),
              static_cast<unsigned long long>(ms), seen.c_str());
  if (c.faults) {
    // The injections fired: host memory ran out and the device refused.
    if (c.host_faults) {
      EXPECT_GT(sh.errors["host oom"], 0) << seen;
    }
    // (One thread's blocks do not fill a device: its OOMs come only from
    // refusals, too rare to count on.)
    if (c.threads > 1) {
      EXPECT_GT(sh.errors["oom"], 0) << seen;
    }
  }
}

TEST(FrontStress, TwoDevicesEightThreads) { stress({2, 8, false}); }
TEST(FrontStress, FourDevicesSixteenThreads) { stress({4, 16, false}); }
TEST(FrontStress, DeviceFaultsTwoDevicesTwelveThreads) { stress({2, 12, true, false}); }
TEST(FrontStress, DeviceFaultsFourDevicesSixteenThreads) { stress({4, 16, true, false}); }
// Host memory running out at a random allocation inside any call (one call
// in 40 armed), with the device faults too.
TEST(FrontStress, HostFaultsTwoDevicesTwelveThreads) { stress({2, 12, true, true}); }
// One thread, one call in 3 armed, everything checked after each step.
TEST(FrontStress, HostFaultsCheckedAfterEveryStep) { stress({2, 1, true, true, 3, true}); }

// The runtime's re-initialization race (tests/python/test_runtime.py's,
// here so that ThreadSanitizer sees it): threads allocate and free while
// another re-initializes; a re-init succeeds only while no block is in
// use, and a call racing with it completes on the new allocator.
TEST(FrontStress, ReinitWhileOthersAllocate) {
  const uint64_t ms = env_u64("CACHEALLOC_STRESS_MS", 1500);
  ASSERT_EQ(cachealloc_init("", "simulated:1073741824:2"), 0) << cachealloc_last_error();
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        void* p = nullptr;
        if (cachealloc_try_malloc(4096 << (t % 8), t % 2, nullptr, &p) != 0) {
          bad.fetch_add(1);
          continue;
        }
        std::this_thread::yield();
        cachealloc_free(p, 0, -1, nullptr);
      }
    });
  }
  int inits = 0, refused = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms / 2);
  while (std::chrono::steady_clock::now() < until) {
    if (cachealloc_init("", "simulated:1073741824:2") == 0) ++inits;
    else {
      EXPECT_NE(std::string(cachealloc_last_error()).find("in use"), std::string::npos)
          << cachealloc_last_error();
      ++refused;
    }
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0) << cachealloc_last_error();
  std::printf("[stress] re-init race: %d re-inits, %d refused (blocks in use)\n", inits, refused);
  ASSERT_EQ(cachealloc_empty_cache(-1), 0);
  for (int d = 0; d < 2; ++d) {
    int64_t allocated = -1, reserved = -1;
    ASSERT_EQ(cachealloc_usage(d, &allocated, &reserved), 0);
    EXPECT_EQ(allocated, 0);
    EXPECT_EQ(reserved, 0);
    check_device(d);
  }
}

// Profiler reporters detached while other threads make reported calls
// (Runtime::detach_reporters): threads that never profile (as NCCL's
// watchdog freeing tensors) detach them every 4,096 frees; the profiled
// threads re-attach them. Every reported call must get its own block: a
// detach between a call's look at the reporters and its event would leave
// it with device -1.
TEST(FrontStress, ReportersDetachWhileOthersReport) {
  const uint64_t ms = env_u64("CACHEALLOC_STRESS_MS", 1500);
  ASSERT_EQ(cachealloc_init("", "simulated:1073741824:2"), 0) << cachealloc_last_error();
  std::atomic<bool> stop{false};
  std::atomic<long> missed{0}, reported{0}, detaches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int device = t % 2;
      const auto size = static_cast<ssize_t>(512 * (1 + t));
      cachealloc_block_report r{};
      while (!stop.load(std::memory_order_relaxed)) {
        void* p = nullptr;
        ASSERT_EQ(cachealloc_try_malloc_report(size, device, nullptr, &p, &r), 0);
        if (r.device != device || r.size != static_cast<size_t>(size)) missed.fetch_add(1);
        ASSERT_EQ(cachealloc_free_report(p, -1, &r), 0);
        if (r.device != device || r.size != static_cast<size_t>(size)) missed.fetch_add(1);
        reported.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (unsigned i = 0; i < Runtime::kDetachReportersAfter; ++i) {
          void* p = nullptr;
          ASSERT_EQ(cachealloc_try_malloc_report(4096, t, nullptr, &p, nullptr), 0);
          ASSERT_EQ(cachealloc_free_report(p, -1, nullptr), 0);
        }
        detaches.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(ms / 2));
  stop = true;
  for (auto& t : threads) t.join();
  std::printf("[stress] reporters: %ld reported pairs, %ld detaches, %ld reports missed\n",
              reported.load(), detaches.load(), missed.load());
  EXPECT_GT(detaches.load(), 0);
  EXPECT_EQ(missed.load(), 0);
  ASSERT_EQ(cachealloc_empty_cache(-1), 0);
  for (int d = 0; d < 2; ++d) check_device(d);
}

}  // namespace
}  // namespace cachealloc
