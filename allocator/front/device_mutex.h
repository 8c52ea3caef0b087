// The lock that serialises calls into one device's allocator.
//
// Why not std::mutex: the critical sections are short (a cache-hit malloc or
// free is well under 100 ns) and almost always uncontended, so the lock's own
// cost is a large share of the hot path. glibc's pthread_mutex_lock/unlock
// are out-of-line calls that dispatch on the mutex kind (about 150
// instructions per allocate+free pair, measured with callgrind), and any
// lock that can wake sleepers must make its unlock an atomic
// read-modify-write (to learn whether someone sleeps), which costs as much
// as the lock's compare-and-swap.
//
// This lock is one compare-and-swap to lock and one plain release store to
// unlock. Waiters are never woken; they look again:
//   1. spin: 1000 pause instructions, 7-40 us depending on the CPU's pause
//      latency; the usual holder is leaving a sub-100 ns critical section;
//   2. yield the CPU a few times: the holder may be descheduled;
//   3. sleep in growing naps (up to kMaxNap): the holder is reserving or
//      releasing device memory, which takes milliseconds.
// Cost of the design: after a long hold, a sleeping waiter takes up to about
// one nap (plus the kernel's timer slack, ~50 us) to notice the lock is
// free, and a napping waiter checks only once per nap, so a thread that
// re-locks quickly can pass it over again and again: no fairness and no
// bound on waiting (the futex lock this replaced let threads barge in too).
// Contention is rare in PyTorch (one thread allocates at a time on a device,
// as a rule), and a long hold is a device call that takes longer.
//
// State of `word_`: 0 unlocked, 1 locked. Invariant: only the holder stores
// 0, only a successful CAS from 0 stores 1.
//
// Not recursive; not fair. Satisfies BasicLockable (std::lock_guard works).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace cachealloc {

class DeviceMutex {
 public:
  DeviceMutex() = default;
  DeviceMutex(const DeviceMutex&) = delete;
  DeviceMutex& operator=(const DeviceMutex&) = delete;

  void lock() {
    if (try_lock()) [[likely]] return;
    lock_contended();
  }

  bool try_lock() {
    uint32_t expected = 0;
    return word_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                         std::memory_order_relaxed);
  }

  // Release store: everything written while holding the lock is visible to
  // the next holder (its CAS acquires). No wake-up to send.
  void unlock() { word_.store(0, std::memory_order_release); }

 private:
  static constexpr int kSpins = 1000;     // pause ~7-40 ns each
  static constexpr int kYields = 16;
  static constexpr std::chrono::microseconds kMaxNap{200};

  bool free_now_and_taken() {
    return word_.load(std::memory_order_relaxed) == 0 && try_lock();
  }

  [[gnu::noinline]] void lock_contended() {
    for (int i = 0; i < kSpins; ++i) {
      pause();
      if (free_now_and_taken()) return;
    }
    for (int i = 0; i < kYields; ++i) {
      std::this_thread::yield();
      if (free_now_and_taken()) return;
    }
    for (std::chrono::microseconds nap{1};; nap = std::min(nap * 2, kMaxNap)) {
      std::this_thread::sleep_for(nap);
      if (free_now_and_taken()) return;
    }
  }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<uint32_t> word_{0};
};

}  // namespace cachealloc
