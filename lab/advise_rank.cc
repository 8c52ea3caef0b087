#include "lab/advise_rank.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace cachealloc {

std::vector<size_t> rank_configs(const std::vector<RankKey>& keys) {
  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (keys.empty()) return order;
  size_t best = keys[0].min_memory;
  for (const RankKey& k : keys) best = std::min(best, k.min_memory);
  auto near_best = [best](const RankKey& k) {
    return static_cast<double>(k.min_memory) <=
           static_cast<double>(best) * (1.0 + kNearBestFraction);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const RankKey& x = keys[a];
    const RankKey& y = keys[b];
    const bool nx = near_best(x), ny = near_best(y);
    if (nx != ny) return nx;
    if (nx)
      return std::tie(x.ooms, x.device_calls, x.min_memory, x.keys) <
             std::tie(y.ooms, y.device_calls, y.min_memory, y.keys);
    return std::tie(x.min_memory, x.ooms, x.device_calls, x.keys) <
           std::tie(y.min_memory, y.ooms, y.device_calls, y.keys);
  });
  return order;
}

}  // namespace cachealloc
