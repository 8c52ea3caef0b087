// The two flags malloc's cache-hit path tests before anything else: one
// byte of reasons to leave it for the out-of-line path, and whether a
// private pool is routed to. A byte test each, instead of asking the parts
// whose state they summarize (several loads and compares per malloc).
//
// Each flag is kept by the part that owns the state it summarizes, after
// every change of that state, also when the change throws part way (a
// KeepAtExit guard), and that part's check() tests it:
//   has(kStreamWork)       == events.has_work()              (StreamEvents)
//   has(kExpandableBlocks) == expandable.on() || !expandable.empty()
//                                                              (DeviceSegments)
//   has(kPolicy)           == a placement policy is set       (the engine; constant)
//   routing()              == pools.routing()                 (PrivatePools)
// Cost: a byte store per change; never written on the cache-hit path.
#pragma once

#include <cstdint>
#include <utility>

namespace cachealloc {

class FastPath {
 public:
  enum Reason : uint8_t {
    kStreamWork = 1,        // cross-stream frees wait for events (or the routes)
    kExpandableBlocks = 2,  // expandable segments exist, or the setting is on
    kPolicy = 4,            // a placement policy decides, out of line
  };

  // Non-zero: malloc leaves the hot path (the reasons, or'ed).
  uint8_t slow_reasons() const { return slow_; }
  bool has(Reason reason) const { return (slow_ & reason) != 0; }
  void set(Reason reason, bool on) {
    slow_ = static_cast<uint8_t>(on ? slow_ | reason : slow_ & ~reason);
  }
  bool routing() const { return routing_; }
  void set_routing(bool on) { routing_ = on; }

  // Sets `reason` to derive() when it goes out of scope, thrown through or
  // not: for a step that may change the state part way and then throw.
  template <typename Derive>
  class [[nodiscard]] KeepAtExit {
   public:
    KeepAtExit(FastPath& fast, Reason reason, Derive derive)
        : fast_(fast), reason_(reason), derive_(std::move(derive)) {}
    ~KeepAtExit() { fast_.set(reason_, derive_()); }
    KeepAtExit(const KeepAtExit&) = delete;
    KeepAtExit& operator=(const KeepAtExit&) = delete;

   private:
    FastPath& fast_;
    const Reason reason_;
    Derive derive_;
  };

 private:
  uint8_t slow_ = 0;
  bool routing_ = false;
};

}  // namespace cachealloc
