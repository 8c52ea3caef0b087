// A tensor free on the last of 4 devices against one on device 0.
//
// PyTorch's tensor deleter gives cachealloc no device (device -1), so the
// front must find the block's device itself. Before the device directory
// (allocator/front/device_directory.h) it locked and probed devices 0, 1, ... in
// turn: a free on device 3 of 4 cost four lock/probe steps, one on device 0
// one step. This times cache-hit allocate + device-less free pairs on each
// device of a 4-device simulated allocator, rounds interleaved so machine
// load hits both alike, and prints the median ns per pair and the ratio
// last/first (target: within 5 %, i.e. 0.95 to 1.05). The pair with the
// device given (what the C API's callers that know it pay) is printed for
// reference.
//
//   free_path_bench [ROUNDS] [PAIRS_PER_ROUND]
//   free_path_bench count DEVICE PAIRS    pairs on one device, untimed, for
//                                          callgrind (count_free_path.sh): the
//                                          load-independent form of the ratio
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "allocator/front/caching_allocator.h"
#include "allocator/sim/simulated_device.h"

namespace cachealloc {
namespace {

constexpr int kDevices = 4;
constexpr size_t kBytes = 65536;  // a small-pool block

// ns per pair over `pairs` allocate+free pairs on `device`; `hint` is the
// device passed to deallocate (-1 as PyTorch's deleter passes).
double time_pairs(CachingAllocator& a, int device, int hint, long pairs) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) a.deallocate(a.allocate(kBytes, device, 0), hint);
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / static_cast<double>(pairs);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Devices 1 TiB apart, as the runtime's simulated backend lays them out.
struct FourDevices {
  FourDevices() {
    for (int i = 0; i < kDevices; ++i) {
      owned.push_back(std::make_unique<SimulatedDevice>(
          size_t{80} << 30, SimulatedDevice::kDefaultBase + (static_cast<uintptr_t>(i) << 40)));
      backends.push_back(owned.back().get());
    }
  }
  std::vector<std::unique_ptr<SimulatedDevice>> owned;
  std::vector<DeviceBackend*> backends;
};

int count(int device, long pairs) {
  FourDevices devices;
  CachingAllocator a(AllocatorConfig{}, devices.backends);
  for (long i = 0; i <= pairs; ++i) a.deallocate(a.allocate(kBytes, device, 0), -1);
  return 0;
}

int run(int rounds, long pairs) {
  FourDevices devices;
  CachingAllocator a(AllocatorConfig{}, devices.backends);
  const int last = kDevices - 1;
  std::vector<double> first_free, last_free, first_hinted, last_hinted;
  for (int r = 0; r < rounds; ++r) {
    first_free.push_back(time_pairs(a, 0, -1, pairs));
    last_free.push_back(time_pairs(a, last, -1, pairs));
    first_hinted.push_back(time_pairs(a, 0, 0, pairs));
    last_hinted.push_back(time_pairs(a, last, last, pairs));
  }
  const double f = median(first_free), l = median(last_free);
  std::printf("pair (allocate + free), median of %d rounds of %ld pairs, %zu B blocks\n", rounds,
              pairs, kBytes);
  std::printf("  device-less free (PyTorch deleter): device 0 %.1f ns, device %d %.1f ns\n", f,
              last, l);
  std::printf("  free with its device given:         device 0 %.1f ns, device %d %.1f ns\n",
              median(first_hinted), last, median(last_hinted));
  const double ratio = l / f;
  std::printf("ratio device %d / device 0 (device-less free): %.3f (target 0.95-1.05): %s\n",
              last, ratio, ratio >= 0.95 && ratio <= 1.05 ? "met" : "NOT met");
  return 0;
}

}  // namespace
}  // namespace cachealloc

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "count") {
    const int device = std::atoi(argv[2]);
    const long pairs = std::atol(argv[3]);
    if (device < 0 || device >= 4 || pairs < 0) {
      std::fprintf(stderr, "usage: free_path_bench count DEVICE(0-3) PAIRS\n");
      return 2;
    }
    return cachealloc::count(device, pairs);
  }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 31;
  const long pairs = argc > 2 ? std::atol(argv[2]) : 200000;
  if (rounds < 1 || pairs < 1) {
    std::fprintf(stderr, "usage: free_path_bench [ROUNDS >= 1] [PAIRS_PER_ROUND >= 1]\n");
    return 2;
  }
  return cachealloc::run(rounds, pairs);
}
