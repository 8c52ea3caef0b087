// Tests of SimulatedMemory (allocator/sim/simulated_memory.h), the bookkeeping
// the three simulated devices share: placement by first fit over segments
// and reservations alike, all-or-nothing page mapping, the capacity, events,
// and check() catching a broken invariant.
#include "allocator/sim/simulated_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "allocator/base/errors.h"

namespace cachealloc {
namespace {

constexpr size_t kMiB = 1 << 20;
constexpr uintptr_t kBase = uintptr_t{1} << 40;

TEST(SimulatedMemory, FirstFitIsTheLowestFreePositionOverSegmentsAndReservations) {
  // Against a scan of every aligned position, on random layouts of both.
  std::mt19937_64 rng(21);
  for (int round = 0; round < 200; ++round) {
    SimulatedMemory memory("test device", 1024 * kMiB, kMiB);
    std::vector<std::pair<uintptr_t, size_t>> taken;  // start, extent
    for (int i = 0; i < 12; ++i) {
      const uintptr_t at = kBase + (rng() % 64) * kMiB;
      const size_t bytes = 1 + rng() % (3 * kMiB);
      const bool reservation = rng() % 3 == 0;
      const size_t extent = reservation ? bytes : memory.footprint(bytes);
      if (memory.overlaps(at, extent)) continue;
      if (reservation) memory.add_reservation(at, bytes);
      else memory.add_segment(at, bytes);
      taken.emplace_back(at, extent);
    }
    memory.check();
    const uintptr_t from = kBase + (rng() % 40) * kMiB;
    const size_t extent = (1 + rng() % 4) * kMiB;
    uintptr_t expected = from;
    auto free_at = [&](uintptr_t a) {
      for (const auto& [start, length] : taken)
        if (a < start + length && start < a + extent) return false;
      return true;
    };
    while (!free_at(expected)) expected += kMiB;
    EXPECT_EQ(memory.first_fit(from, extent, kMiB), expected) << "round " << round;
  }
}

TEST(SimulatedMemory, FirstFitRoundsPositionsPastAnExtentUpToTheAlignment) {
  SimulatedMemory memory("test device", 1024 * kMiB, 1);
  memory.add_segment(kBase, kMiB + 1);  // exactly its bytes (alignment 1)
  EXPECT_EQ(memory.first_fit(kBase, kMiB, 1), kBase + kMiB + 1);
  EXPECT_EQ(memory.first_fit(kBase, kMiB, 2 * kMiB), kBase + 2 * kMiB);
  EXPECT_EQ(memory.first_fit(UINTPTR_MAX - kMiB + 1, 2 * kMiB, 1), 0u);  // would wrap
}

TEST(SimulatedMemory, UsedCountsSegmentFootprintsAndMappedPagesButNotReservations) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  memory.add_segment(kBase, 1);
  EXPECT_EQ(memory.used(), 2 * kMiB);
  memory.add_reservation(kBase + 64 * kMiB, 40 * kMiB);
  EXPECT_EQ(memory.used(), 2 * kMiB);
  ASSERT_TRUE(memory.map_pages(kBase + 64 * kMiB, 20 * kMiB, 20 * kMiB));
  EXPECT_EQ(memory.info().free_bytes, 78 * kMiB);
  memory.check();
  memory.unmap_pages(kBase + 64 * kMiB, 20 * kMiB, 20 * kMiB);
  memory.remove_segment(kBase, 1);
  EXPECT_EQ(memory.used(), 0u);
  memory.check();
}

TEST(SimulatedMemory, ASegmentWhoseFootprintWouldWrapAroundHasNoRoom) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  EXPECT_FALSE(memory.has_room(SIZE_MAX));
  EXPECT_FALSE(memory.has_room(0));
  EXPECT_TRUE(memory.has_room(100 * kMiB));
  EXPECT_FALSE(memory.has_room(100 * kMiB + 1));
}

TEST(SimulatedMemory, AMappingThatDoesNotFitOrIsRefusedMapsNothing) {
  SimulatedMemory memory("test device", 50 * kMiB, 2 * kMiB);
  memory.add_reservation(kBase, 100 * kMiB);
  EXPECT_FALSE(memory.map_pages(kBase, 60 * kMiB, 20 * kMiB));  // 3rd page has no room
  EXPECT_FALSE(memory.map_pages(kBase, 40 * kMiB, 20 * kMiB, 1));  // 2nd page refused
  EXPECT_EQ(memory.mapped_pages(), 0u);
  EXPECT_EQ(memory.used(), 0u);
  EXPECT_TRUE(memory.map_pages(kBase, 40 * kMiB, 20 * kMiB, 2));
  EXPECT_EQ(memory.mapped_pages(), 2u);
}

TEST(SimulatedMemory, MappingOutsideAReservationOrTwiceThrowsAndChangesNothing) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  memory.add_reservation(kBase, 40 * kMiB);
  EXPECT_THROW(memory.map_pages(kBase + 20 * kMiB, 40 * kMiB, 20 * kMiB), BackendError);
  EXPECT_THROW(memory.map_pages(kBase, 30 * kMiB, 20 * kMiB), BackendError);  // not whole
  ASSERT_TRUE(memory.map_pages(kBase + 20 * kMiB, 20 * kMiB, 20 * kMiB));
  EXPECT_THROW(memory.map_pages(kBase, 40 * kMiB, 20 * kMiB), BackendError);
  EXPECT_EQ(memory.mapped_pages(), 1u);
  EXPECT_EQ(memory.used(), 20 * kMiB);
  memory.check();
}

TEST(SimulatedMemory, UnmappingAPageThatIsNotMappedThrowsAndChangesNothing) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  memory.add_reservation(kBase, 60 * kMiB);
  ASSERT_TRUE(memory.map_pages(kBase, 20 * kMiB, 20 * kMiB));
  EXPECT_THROW(memory.unmap_pages(kBase, 40 * kMiB, 20 * kMiB), BackendError);
  EXPECT_THROW(memory.unmap_pages(kBase, 20 * kMiB, 2 * kMiB), BackendError);  // other size
  EXPECT_EQ(memory.mapped_pages(), 1u);
  EXPECT_EQ(memory.used(), 20 * kMiB);
}

// Cells (allocator/base/page_handles.h): one handle each, counted as the
// CUDA backend's driver calls; an unmapping that would cut one is refused.
TEST(SimulatedMemory, CellsAreOneHandleEachAndCountedAsDriverCalls) {
  SimulatedMemory memory("test device", 200 * kMiB, 2 * kMiB);
  memory.add_reservation(kBase, 200 * kMiB);
  // 46 MiB from +2 MiB: two 20 MiB cells, then three 2 MiB pages.
  ASSERT_TRUE(memory.map_pages(kBase + 2 * kMiB, 46 * kMiB, 2 * kMiB, SimulatedMemory::kNoPageLimit,
                               PageCells{20 * kMiB, 2}));
  EXPECT_EQ(memory.mapped_pages(), 5u);  // handles
  EXPECT_EQ(memory.used(), 46 * kMiB);
  PageCalls c = memory.page_calls();
  EXPECT_EQ(c.creates, 5u);
  EXPECT_EQ(c.maps, 5u);
  EXPECT_EQ(c.set_access, 1u);
  EXPECT_THROW(memory.unmap_pages(kBase + 32 * kMiB, 16 * kMiB, 2 * kMiB, 20 * kMiB),
               BackendError);  // cuts the second cell
  EXPECT_THROW(memory.unmap_pages(kBase + 22 * kMiB, 26 * kMiB, 2 * kMiB),
               BackendError);  // a cell where only pages were said
  EXPECT_EQ(memory.page_calls().unmaps, 0u);
  memory.unmap_pages(kBase + 22 * kMiB, 26 * kMiB, 2 * kMiB, 20 * kMiB);
  c = memory.page_calls();
  EXPECT_EQ(c.unmaps, 4u);
  EXPECT_EQ(c.releases, 4u);
  EXPECT_EQ(c.syncs, 1u);
  EXPECT_EQ(memory.used(), 20 * kMiB);
  // No room for the second cell: nothing mapped; the first was made and
  // released again (2 creates, 1 release).
  SimulatedMemory small("test device", 30 * kMiB, 2 * kMiB);
  small.add_reservation(kBase, 100 * kMiB);
  EXPECT_FALSE(small.map_pages(kBase, 40 * kMiB, 2 * kMiB, SimulatedMemory::kNoPageLimit,
                               PageCells{20 * kMiB, 2}));
  EXPECT_EQ(small.page_calls().creates, 2u);
  EXPECT_EQ(small.page_calls().releases, 1u);
  EXPECT_EQ(small.used(), 0u);
  memory.check();
}

TEST(SimulatedMemory, AReservationWithPagesMappedCannotBeReleased) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  memory.add_reservation(kBase, 40 * kMiB);
  ASSERT_TRUE(memory.map_pages(kBase + 20 * kMiB, 20 * kMiB, 20 * kMiB));
  EXPECT_THROW(memory.remove_reservation(kBase, 40 * kMiB), BackendError);
  memory.unmap_pages(kBase + 20 * kMiB, 20 * kMiB, 20 * kMiB);
  EXPECT_THROW(memory.remove_reservation(kBase, 20 * kMiB), BackendError);  // wrong size
  memory.remove_reservation(kBase, 40 * kMiB);
  EXPECT_TRUE(memory.reservations().empty());
}

TEST(SimulatedMemory, ReleasingASegmentOfAnotherSizeThrows) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  memory.add_segment(kBase, 3 * kMiB);
  EXPECT_THROW(memory.remove_segment(kBase, 4 * kMiB), BackendError);
  EXPECT_THROW(memory.remove_segment(kBase + 2 * kMiB, 3 * kMiB), BackendError);
  EXPECT_EQ(memory.used(), 4 * kMiB);
}

TEST(SimulatedMemory, ReservationsGoToTheLowestAlignedFreeRange) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  EXPECT_EQ(memory.reserve_first_fit(kBase + 1, 10 * kMiB, 4 * kMiB), kBase + 4 * kMiB);
  EXPECT_EQ(memory.reserve_first_fit(kBase, 10 * kMiB, 4 * kMiB), kBase + 16 * kMiB);
  EXPECT_THROW(memory.reserve_first_fit(kBase, 0, 4 * kMiB), BackendError);
  EXPECT_THROW(memory.reserve_first_fit(kBase, kMiB, 0), BackendError);
  EXPECT_THROW(memory.reserve_first_fit(UINTPTR_MAX - kMiB, 2 * kMiB, 1), BackendError);
  memory.check();
}

TEST(SimulatedMemory, HeldEventsStayPendingUntilCompletedOthersCompleteAtOnce) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  const EventId done = memory.record_event();
  EXPECT_TRUE(memory.event_completed(done));
  memory.hold_events(true);
  const EventId held = memory.record_event();
  EXPECT_FALSE(memory.event_completed(held));
  EXPECT_EQ(memory.last_event(), held);
  memory.complete_event(held);
  EXPECT_TRUE(memory.event_completed(held));
  memory.destroy_event(done);
  memory.destroy_event(held);
  EXPECT_THROW(memory.destroy_event(held), BackendError);
  EXPECT_EQ(memory.live_events(), 0u);
  memory.check();
}

TEST(SimulatedMemory, CheckReportsSegmentsThatOverlap) {
  // add_segment's precondition broken on purpose: check() must say so.
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  memory.add_segment(kBase, 3 * kMiB);
  memory.add_segment(kBase + 2 * kMiB, kMiB);
  EXPECT_THROW(memory.check(), InvariantViolation);
}

TEST(SimulatedMemory, CheckReportsASegmentInsideAReservation) {
  SimulatedMemory memory("test device", 100 * kMiB, 2 * kMiB);
  memory.add_reservation(kBase, 40 * kMiB);
  memory.add_segment(kBase + 20 * kMiB, kMiB);
  EXPECT_THROW(memory.check(), InvariantViolation);
}

}  // namespace
}  // namespace cachealloc
