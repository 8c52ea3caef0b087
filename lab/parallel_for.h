// Runs body(i) for i in [0, n) on up to `threads` threads (the calling one
// included), each taking the next index as it finishes one. The first
// exception thrown by a body is rethrown after every thread has stopped;
// indices not yet taken are then skipped.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace cachealloc {

template <typename Body>
void parallel_for(size_t n, unsigned threads, const Body& body) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; !failed && (i = next.fetch_add(1)) < n;) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  const size_t extra = std::min<size_t>(n, std::max(1u, threads)) - (n > 0 ? 1 : 0);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace cachealloc
