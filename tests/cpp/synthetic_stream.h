// A synthetic trace's requests, built in memory for tests that need a big
// one: about 400 blocks alive at a time (below 400, two requests in three
// allocate; otherwise a random live block is freed), sizes varied enough
// to fragment (a quarter 1-96 MiB, the rest up
// to 2 MiB), every allocation with one of 64 recorded stacks. `entries`
// counts trace entries as a recording would hold them: an allocation is
// one, a free two (free_requested and free_completed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "allocator/base/call_context.h"
#include "lab/request_stream.h"

namespace cachealloc {

inline RequestStream synthetic_stream(size_t entries) {
  RequestStream s;
  s.streams = {0};
  std::vector<ContextPtr> stacks;
  for (int i = 0; i < 64; ++i) {
    auto c = std::make_shared<CallContext>();
    for (int f = 0; f < 12; ++f)
      c->frames.push_back(StackFrame{"layer_" + std::to_string(i) + "_fn" + std::to_string(f),
                                     "model/block" + std::to_string(i % 8) + ".py", 10 + f});
    stacks.push_back(std::move(c));
  }
  std::mt19937_64 rng(7);
  std::vector<uint32_t> live;
  uint32_t next_slot = 0;
  std::vector<uint32_t> free_slots;
  size_t events = 0;
  while (events + 2 <= entries) {
    const bool alloc = live.empty() || (live.size() < 400 && rng() % 3 != 0);
    if (alloc) {
      uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        slot = next_slot++;
      }
      const uint64_t size = (rng() % 4 == 0) ? (1 + rng() % 96) << 20 : 512 * (1 + rng() % 4096);
      s.contexts.emplace_back(s.requests.size(), stacks[rng() % stacks.size()]);
      s.requests.push_back({size, slot, 0, RequestKind::kAlloc});
      live.push_back(slot);
      events += 1;
    } else {
      const size_t k = rng() % live.size();
      s.requests.push_back({0, live[k], 0, RequestKind::kFree});
      free_slots.push_back(live[k]);
      live[k] = live.back();
      live.pop_back();
      events += 2;
    }
  }
  s.slots = next_slot;
  s.recorded_events = events;
  return s;
}

}  // namespace cachealloc
