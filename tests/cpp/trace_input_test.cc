// Hostile snapshot contents that parse_trace and replay_trace must turn into
// a TraceFormatError or a divergence: wrong kinds, memory amplification
// through shared pickle values, and segments a real device could never
// hand out. Each was found by fuzzing (trace_fuzz_test.cc); the inputs here
// are the minimized cases, built in code.
#include <gtest/gtest.h>
#if defined(__SANITIZE_ADDRESS__)
// ASan's runtime has this whether or not its headers
// (<sanitizer/allocator_interface.h>) are installed; they are not here.
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "allocator/base/errors.h"
#include "pickle/pickle_reader.h"
#include "pickle/pickle_writer.h"
#include "replay/lockstep_replay.h"
#include "replay/replayer.h"
#include "replay/trace.h"

namespace cachealloc {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

PyValue event(const char* action, int64_t addr, int64_t size, int64_t stream = 0) {
  PyValue e = PyValue::dict();
  e.set("action", PyValue::str(action));
  e.set("addr", PyValue::integer(addr));
  e.set("size", PyValue::integer(size));
  e.set("stream", PyValue::integer(stream));
  return e;
}

// {"segments": segments, "device_traces": [events]}.
PyValue snapshot(std::vector<PyValue> events, PyValue segments = PyValue::list()) {
  PyValue s = PyValue::dict();
  s.set("segments", std::move(segments));
  s.set("device_traces", PyValue::list({PyValue::list(std::move(events))}));
  return s;
}

PyValue segment(PyValue segment_type, PyValue blocks, int64_t device = 0) {
  PyValue s = PyValue::dict();
  s.set("device", PyValue::integer(device));
  s.set("address", PyValue::integer(kMiB * 1024));
  s.set("total_size", PyValue::integer(2 * kMiB));
  s.set("segment_type", std::move(segment_type));
  s.set("blocks", std::move(blocks));
  return s;
}

PyValue block(PyValue state) {
  PyValue b = PyValue::dict();
  b.set("size", PyValue::integer(2 * kMiB));
  b.set("state", std::move(state));
  return b;
}

// Expects parse_trace to throw TraceFormatError with `part` in the message.
void ExpectTraceFormatError(const PyValue& snap, const std::string& part, bool keep_frames = false) {
  try {
    parse_trace(snap, keep_frames);
    ADD_FAILURE() << "accepted, expected a TraceFormatError containing: " << part;
  } catch (const TraceFormatError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(TraceInput, FieldsOfTheWrongKindAreTraceFormatErrorsNamingTheField) {
  // These used to escape as PyValueError ("expected str, got int"), naming
  // neither the entry nor the field.
  const PyValue inactive = PyValue::str("inactive");
  ExpectTraceFormatError(snapshot({}, PyValue::list({segment(PyValue::integer(1), PyValue::list())})),
                         "segment 0: field 'segment_type' is int, expected str");
  ExpectTraceFormatError(snapshot({}, PyValue::list({segment(PyValue::str("small"), PyValue::dict())})),
                         "segment 0: field 'blocks' is dict, expected list");
  ExpectTraceFormatError(
      snapshot({}, PyValue::list({segment(PyValue::str("small"), PyValue::list({block(PyValue::none())}))})),
      "segment 0 block 0: field 'state' is NoneType, expected str");
  PyValue e = event("alloc", 512 * kMiB, 512);
  PyValue frame = PyValue::dict();
  frame.set("name", PyValue::integer(1));
  frame.set("filename", PyValue::str("f.py"));
  frame.set("line", PyValue::integer(1));
  e.set("frames", PyValue::list({frame}));
  ExpectTraceFormatError(snapshot({e}), "device 0 entry 0: field 'name' is int, expected str",
                         /*keep_frames=*/true);
}

TEST(TraceInput, UnknownBlockStateIsRefusedNotCopiedPerBlock) {
  // One 1 MiB string referenced by 100000 blocks is a ~1 MiB pickle; copying
  // the state per block would take 100 GiB.
  const PyValue huge = PyValue::str(std::string(kMiB, 'x'));
  const PyValue shared_block = block(huge);
  const PyValue blocks = PyValue::list(std::vector<PyValue>(100000, shared_block));
  const PyValue snap = read_pickle(write_pickle(
      snapshot({}, PyValue::list({segment(PyValue::str("large"), blocks)}))));
  ExpectTraceFormatError(snap, "segment 0 block 0: unknown state 'xxxx");
  for (const char* state : {"active_allocated", "active_pending_free", "inactive"}) {
    const PyValue ok = snapshot({}, PyValue::list({segment(PyValue::str("large"),
                                                           PyValue::list({block(PyValue::str(state))}))}));
    EXPECT_EQ(parse_trace(ok, false).final_segments.at(0).blocks.at(0).second, state);
  }
}

TEST(TraceInput, MoreDevicesThanPyTorchCanNumberAreRefused) {
  // 200000 empty device traces are a 400 kB pickle (1 kB gzipped) and used
  // to cost a replay engine each: 1.5 GB.
  PyValue snap = PyValue::dict();
  snap.set("device_traces",
           PyValue::list(std::vector<PyValue>(kMaxTraceDevices + 1, PyValue::list())));
  ExpectTraceFormatError(snap, "129 devices, more than 128");
  PyValue most = PyValue::dict();
  most.set("device_traces", PyValue::list(std::vector<PyValue>(kMaxTraceDevices, PyValue::list())));
  EXPECT_EQ(parse_trace(most, false).devices.size(), kMaxTraceDevices);
  // A segment's device is checked against the same bound, not truncated to int.
  const PyValue blocks = PyValue::list({block(PyValue::str("inactive"))});
  for (int64_t device : {int64_t{-1}, int64_t{128}, int64_t{1} << 32})
    ExpectTraceFormatError(snapshot({}, PyValue::list({segment(PyValue::str("large"), blocks, device)})),
                           "device " + std::to_string(device) + " is not in [0, 128)");
}

TEST(TraceInput, FramesListSharedByEntriesIsCopiedOnce) {
  // A pickle can reference one frames list from every entry for 2 bytes
  // each; the entries share one context instead of a copy each.
  PyValue frame = PyValue::dict();
  frame.set("name", PyValue::str(std::string(4096, 'n')));
  frame.set("filename", PyValue::str("f.py"));
  frame.set("line", PyValue::integer(7));
  const PyValue frames = PyValue::list(std::vector<PyValue>(100, frame));
  std::vector<PyValue> events;
  for (int i = 0; i < 1000; ++i) {
    PyValue e = event("alloc", 512 * kMiB, 512);
    e.set("frames", frames);
    events.push_back(e);
  }
  const RecordedTrace t = parse_trace(read_pickle(write_pickle(snapshot(events))), true);
  ASSERT_EQ(t.devices.at(0).size(), 1000u);
  ASSERT_TRUE(t.devices[0][0].context);
  EXPECT_EQ(t.devices[0][0].context->frames.size(), 100u);
  EXPECT_EQ(t.devices[0][0].context->frames[0].line, 7);
  for (const RecordedEvent& e : t.devices[0]) EXPECT_EQ(e.context, t.devices[0][0].context);
}

// Bytes the heap has handed out and not taken back (ASan's own allocator
// replaces malloc's under the sanitizers).
size_t heap_in_use() {
#if defined(__SANITIZE_ADDRESS__)
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

// A trace that replays clean (a segment, then a block allocated and freed
// over and over: `entries` entries) whose every entry has its own frames list
// of `refs` references to one frame dict named by a `name_bytes` string:
// as tests/frames_amplification.py writes it, the name and the dict once,
// each reference 2 bytes. Returned as read back from its pickle.
PyValue frames_bomb(size_t name_bytes, size_t refs, size_t entries) {
  PyValue frame = PyValue::dict();
  frame.set("name", PyValue::str(std::string(name_bytes, 'n')));
  frame.set("filename", PyValue::str("hostile.py"));
  frame.set("line", PyValue::integer(1));
  const int64_t a = int64_t{1} << 30;
  std::vector<PyValue> events = {event("segment_alloc", a, 2 * kMiB)};
  while (events.size() < entries)
    for (const char* action : {"alloc", "free_requested", "free_completed"})
      events.push_back(event(action, a, 512));
  for (PyValue& e : events) e.set("frames", PyValue::list(std::vector<PyValue>(refs, frame)));
  const std::string bytes = write_pickle(snapshot(std::move(events)));
  // The name once, then a few bytes per reference and entry.
  EXPECT_LT(bytes.size(), name_bytes + entries * (3 * refs + 100));
  return read_pickle(bytes);
}

// Frames used to copy their name and file name: 64 entries x 64 frames
// referencing one 64 KiB name took 256 MiB here (a 1.4 kB .pickle.gz with a
// 1 MiB name, 20 GB in `cachealloc replay --snapshot`).
constexpr size_t kBombNameBytes = 64 << 10, kBombRefs = 64, kBombEntries = 64;
constexpr size_t kBombCopiesBytes = kBombNameBytes * kBombRefs * kBombEntries;

TEST(TraceInput, FramesReferencingOneLongNameShareItInsteadOfCopyingIt) {
  const PyValue snap = frames_bomb(kBombNameBytes, kBombRefs, kBombEntries);
  const size_t before = heap_in_use();
  const RecordedTrace t = parse_trace(snap, /*keep_frames=*/true);
  const size_t used = heap_in_use() - before;
  // About 40 bytes per frame reference, 160 kB in all.
  EXPECT_LT(used, size_t{2} << 20) << "copies would take " << kBombCopiesBytes;
  ASSERT_EQ(t.devices.at(0).size(), 64u);
  std::set<const CallContext*> contexts;
  std::set<const std::string*> names;
  for (const RecordedEvent& e : t.devices[0]) {
    ASSERT_TRUE(e.context);
    contexts.insert(e.context.get());
    ASSERT_EQ(e.context->frames.size(), kBombRefs);
    for (const StackFrame& f : e.context->frames) names.insert(&f.name.str());
  }
  // Each entry has its own list (its own context), yet one name: the
  // reader's string.
  EXPECT_EQ(contexts.size(), 64u);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(*names.begin(), &snap.at("device_traces").items()[0].items()[0].at("frames")
                                .items()[0].at("name").as_str());
}

TEST(TraceInput, ReplayedSnapshotOfFramesReferencingOneLongNameHoldsItOnce) {
  // The replayed snapshot used to copy every frame's strings again (one
  // frames list per trace entry): as much as the parse, twice in all.
  const PyValue snap = frames_bomb(kBombNameBytes, kBombRefs, kBombEntries);
  const RecordedTrace t = parse_trace(snap, /*keep_frames=*/true);
  ReplayOptions options;
  options.build_snapshot = true;
  const size_t before = heap_in_use();
  const ReplayResult r = replay_trace(t, options);
  ASSERT_FALSE(r.divergence);
  ASSERT_TRUE(r.snapshot);
  const std::string bytes = write_pickle(*r.snapshot);
  const size_t used = heap_in_use() - before;
  EXPECT_LT(used, size_t{4} << 20) << "copies would take " << kBombCopiesBytes;
  // The name once; each entry's list is its own, its frames one dict.
  EXPECT_LT(bytes.size(), kBombNameBytes + kBombEntries * (5 * kBombRefs + 300));
  const PyValue back = read_pickle(bytes);
  const PyValue::List& entries = back.at("device_traces").items().at(0).items();
  ASSERT_EQ(entries.size(), kBombEntries);
  for (size_t i = 0; i < entries.size(); ++i)
    EXPECT_EQ(entries[i].at("frames"), snap.at("device_traces").items()[0].items()[i].at("frames"))
        << "entry " << i;
}

// Replays `events` on one device, with invariant checks after each request.
ReplayResult replay(std::vector<PyValue> events) {
  ReplayOptions options;
  options.check_invariants = true;
  return replay_trace(parse_trace(snapshot(std::move(events)), false), options);
}

TEST(TraceInput, SegmentOverlappingALiveSegmentDivergesInsteadOfCorruptingTheEngine) {
  // The second segment_alloc lies inside the first segment. The replay
  // device used to hand it out, so the trace "replayed clean" while the
  // engine held two blocks at one address (check_invariants: "segments
  // overlap").
  const int64_t a = int64_t{1} << 32;
  const ReplayResult r = replay({
      event("segment_alloc", a, 20 * kMiB), event("alloc", a, 2 * kMiB),
      event("alloc", a + 2 * kMiB, 18 * kMiB),
      event("segment_alloc", a + 2 * kMiB, 18 * kMiB), event("alloc", a + 2 * kMiB, 18 * kMiB),
      event("free_requested", a + 2 * kMiB, 18 * kMiB), event("free_completed", a + 2 * kMiB, 18 * kMiB),
  });
  ASSERT_TRUE(r.divergence);
  EXPECT_EQ(r.divergence->index, 3u);
  EXPECT_EQ(r.divergence->expected.action, "segment_alloc");
  EXPECT_NE(r.divergence->got.address, static_cast<size_t>(a + 2 * kMiB));
}

TEST(TraceInput, SegmentAtTheReplayDevicesOwnAddressesDoesNotCollide) {
  // The replay device hands unexpected segments out from 0xdead00000000000.
  // A trace that put a segment there made the next unexpected one land on
  // it: two segments at one address, then "release of unknown segment"
  // (BackendError) escaped replay_trace.
  const int64_t u = int64_t{0xdead00000000000};
  const ReplayResult r = replay({
      event("segment_alloc", u, 20 * kMiB), event("alloc", u, 2 * kMiB),
      event("alloc", u + 2 * kMiB, 18 * kMiB),
      event("free_requested", u, 2 * kMiB), event("free_completed", u, 2 * kMiB),
      event("segment_alloc", u, 20 * kMiB, 1), event("alloc", u, 2 * kMiB, 1),
      event("free_requested", u, 2 * kMiB, 1), event("free_completed", u, 2 * kMiB, 1),
      event("free_requested", u + 2 * kMiB, 18 * kMiB), event("free_completed", u + 2 * kMiB, 18 * kMiB),
      event("segment_free", u, 20 * kMiB), event("segment_free", u, 20 * kMiB, 1),
  });
  ASSERT_TRUE(r.divergence);
  EXPECT_EQ(r.divergence->index, 5u);
  EXPECT_NE(r.divergence->got.address, static_cast<size_t>(u));
}

TEST(TraceInput, SegmentAtAddressZeroIsNeverHandedOut) {
  // 0 is how a backend says "device full". A segment recorded there used to
  // be handed out as 0: the engine took it as a refusal (and retried), while
  // the replay device counted the bytes as used for good.
  const ReplayResult r = replay({event("segment_alloc", 0, 2 * kMiB), event("alloc", 0, 512)});
  ASSERT_TRUE(r.divergence);
  EXPECT_EQ(r.divergence->index, 0u);
  EXPECT_EQ(r.divergence->got.action, "segment_alloc");
}

TEST(TraceInput, DivergencePastTheLastEventIsIndexedPastItInATraceWithSkippedEntries) {
  // The trace ends with a waiting free's completion: replayed as an
  // empty_cache() that also frees A's segment, which the trace does not
  // show. That extra event lies past the last one (trace index 6), so the
  // divergence is at 7. It used to be reported at the number of parsed
  // events (6: the snapshot entry is skipped), the completion that matched.
  const int64_t a = int64_t{1} << 32, b = int64_t{1} << 33;
  const ReplayResult r = replay({
      event("segment_alloc", a, 2 * kMiB), event("alloc", a, 512),
      event("snapshot", 0, 0),
      event("free_requested", a, 512),
      event("segment_alloc", b, 2 * kMiB, 1), event("alloc", b, 512, 1),
      event("free_completed", a, 512),
  });
  ASSERT_TRUE(r.divergence);
  EXPECT_EQ(r.divergence->index, 7u);
  EXPECT_EQ(r.divergence->expected.action, "nothing");
  EXPECT_EQ(r.divergence->got.action, "segment_free");
}

TEST(TraceInput, ImmediateFreeFollowedOnlyBySideEffectsReadsNoEventPastTheEnd) {
  // Found by fuzz_replay (docs/fuzzing.md). A trace with a waiting free
  // (3, completed at 6) and an immediate free (4, completed at 5) after
  // which only side effects follow (a delayed completion and a segment
  // free) to the end. Whether the immediate free may have waited instead
  // is asked of the request after its completion; the replay looked for it
  // at side_effects_end(), which is the end here, and read the event past
  // the last one.
  const int64_t a = int64_t{1} << 32;
  RecordedTrace trace = parse_trace(
      snapshot({
          event("segment_alloc", a, 2 * kMiB), event("alloc", a, 512),
          event("alloc", a + 512, 512), event("free_requested", a, 512),
          event("free_requested", a + 512, 512), event("free_completed", a + 512, 512),
          event("free_completed", a, 512), event("segment_free", a, 2 * kMiB),
      }),
      false);
  std::vector<RecordedEvent>& events = trace.devices.at(0);
  const size_t n = events.size();
  ASSERT_EQ(n, 8u);

  // The events end where their allocation ends, so AddressSanitizer (the
  // sanitizer build of this suite, scripts/sanitize_ci.sh) reports any read
  // past them.
  events.shrink_to_fit();
  ReplayOptions options;
  options.check_invariants = true;
  const ReplayResult r = replay_trace(trace, options);
  EXPECT_FALSE(r.divergence) << r.divergence->expected.action << " / " << r.divergence->got.action;
  EXPECT_EQ(r.events, n);

  // In any build: the slot past the end holds an alloc, which the replay
  // took for a request that could have synchronized and completed the free
  // (an ambiguous point at event 4). Nothing follows the completion but
  // side effects, so nothing could have: no ambiguous point at 4.
  std::vector<RecordedEvent> padded;
  padded.reserve(n + 1);
  padded.assign(events.begin(), events.end());
  padded.push_back(RecordedEvent{});  // action kAlloc
  padded.pop_back();
  replay_detail::LockstepReplay replay(0, padded, trace.config, options, {});
  size_t empty_cache_calls = 0, done = 0;
  EXPECT_FALSE(replay.run(empty_cache_calls, done, n));
  for (size_t p : replay.ambiguous())
    EXPECT_NE(replay_detail::LockstepReplay::point_event(p), 4u) << "ambiguous point " << p;
}

}  // namespace
}  // namespace cachealloc
