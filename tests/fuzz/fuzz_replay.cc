// Fuzz target: a snapshot file through the trace reader and the lockstep
// replay (replay/trace.h, replay/replayer.h), as `cachealloc replay` reads
// one: read_pickle_file, parse_trace (with frames kept, as for --snapshot),
// replay_trace with the engine's invariants checked after every request
// and a replayed snapshot built, which is then written as a pickle.
//
// Properties beyond "refused with a documented error, or replayed"
// (fuzz_input.h): a replay never throws for a divergence (replayer.h), so
// only a bad config may escape it, as a ConfigError; an engine invariant
// broken on the way (InvariantViolation) is a finding, not a refusal; and a
// replay without divergence must have replayed every event.
#include <cstdint>
#include <cstdlib>

#include "pickle/pickle_writer.h"
#include "replay/replayer.h"
#include "tests/fuzz/fuzz_input.h"

using namespace cachealloc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RecordedTrace trace;
  try {
    trace = parse_trace(fuzz::read_as_file(data, size), /*keep_frames=*/true);
  } catch (const std::exception& e) {
    if (!fuzz::documented_refusal(e)) fuzz::undocumented(e);
    return 0;
  }
  ReplayOptions options;
  options.build_snapshot = true;
  options.check_invariants = true;
  ReplayResult result;
  try {
    result = replay_trace(trace, options);
  } catch (const InvariantViolation& e) {
    std::fprintf(stderr, "fuzz_replay: engine invariant broken: %s\n", e.what());
    std::abort();
  } catch (const ConfigError&) {
    return 0;
  } catch (const std::exception& e) {
    fuzz::undocumented(e);
  }
  size_t events = 0;
  for (const auto& d : trace.devices) events += d.size();
  if (!result.divergence && result.events != events) {
    std::fprintf(stderr, "fuzz_replay: no divergence, but %zu of %zu events replayed\n",
                 result.events, events);
    std::abort();
  }
  if (result.snapshot) (void)write_pickle(*result.snapshot);
  return 0;
}
