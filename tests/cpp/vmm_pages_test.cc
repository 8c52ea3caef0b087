// VmmPages (bindings/cuda/vmm_pages.h): the page bookkeeping of expandable
// segments on the GPU, against a driver that keeps score of every handle,
// mapping and access grant and fails where a test asks it to.
#include "bindings/cuda/vmm_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "allocator/base/errors.h"
#include "tests/cpp/scoring_vmm_driver.h"

namespace cachealloc {
namespace {

using testing::ScoringDriver;

constexpr size_t kPage = size_t{2} << 20;    // small-pool page, 2 MiB
constexpr size_t kLarge = size_t{20} << 20;  // large-pool page, 20 MiB

class VmmPagesTest : public ::testing::Test {
 protected:
  ScoringDriver driver;
  VmmPages pages{driver, /*ipc_handles=*/true};
};

TEST_F(VmmPagesTest, GrowthCreatesAndMapsOnePagePerPageAndGrantsTheDevice) {
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base + 2 * kPage, 3 * kPage, kPage));
  EXPECT_EQ(driver.live_.size(), 3u);
  EXPECT_EQ(driver.maps_, 3);
  EXPECT_EQ(pages.mapped_pages(0), 3u);
  // One grant over the whole growth, for the device itself.
  ASSERT_EQ(driver.accesses_.size(), 1u);
  EXPECT_EQ(driver.accesses_[0], (ScoringDriver::Access{base + 2 * kPage, 3 * kPage, 0}));
}

// Cells (the rescue policy's, allocator/base/page_handles.h): the first
// cells of a mapping are one handle each, then one per page; an unmapping
// takes whole handles and refuses, with nothing unmapped, one that would cut
// a cell; pages of a cell cannot be shared in native's format.
TEST_F(VmmPagesTest, CellsAreOneHandleEachAndAreNeverCut) {
  const uintptr_t base = pages.reserve(0, 64 * kLarge, 0);
  // 46 MiB: two 20 MiB cells, then three 2 MiB pages.
  ASSERT_TRUE(pages.map(0, base + kPage, 23 * kPage, kPage, PageCells{kLarge, 2}));
  EXPECT_EQ(driver.live_.size(), 5u);
  EXPECT_EQ(driver.maps_, 5);
  EXPECT_EQ(driver.live_.at(driver.mapped_.at(base + kPage)), kLarge);
  EXPECT_EQ(driver.live_.at(driver.mapped_.at(base + 21 * kPage)), kPage);
  EXPECT_EQ(pages.mapped_pages(0), 23u);
  EXPECT_EQ(pages.live_handles(0), 5u);
  ASSERT_EQ(driver.accesses_.size(), 1u);  // one grant over all of it
  auto message = [](auto f) {
    try {
      f();
    } catch (const BackendError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Half of the second cell and the pages after it: refused, nothing done.
  EXPECT_NE(message([&] { pages.unmap(0, base + 16 * kPage, 8 * kPage, kPage, kLarge, 0); })
                .find("cuts the handle"),
            std::string::npos);
  EXPECT_NE(message([&] { pages.unmap(0, base + kPage, 5 * kPage, kPage, kLarge, 0); })
                .find("cuts the handle"),
            std::string::npos);
  EXPECT_EQ(driver.syncs_, 0);
  EXPECT_EQ(driver.live_.size(), 5u);
  std::string shared;
  EXPECT_NE(message([&] { pages.share(0, base + kPage, kPage, &shared); }).find("cannot be shared"),
            std::string::npos);
  // The second cell and the ragged pages: 4 handles, one sync.
  pages.unmap(0, base + 11 * kPage, 13 * kPage, kPage, kLarge, 0);
  EXPECT_EQ(driver.syncs_, 1);
  EXPECT_EQ(driver.live_.size(), 1u);
  EXPECT_EQ(pages.mapped_pages(0), 10u);
  // Cells that do not fit the mapping are refused before any create.
  EXPECT_THROW(pages.map(0, base + 30 * kPage, 15 * kPage, kPage, PageCells{kLarge, 2}),
               BackendError);
  EXPECT_EQ(driver.live_.size(), 1u);
  pages.unmap(0, base + kPage, 10 * kPage, kPage, kLarge, 0);
  EXPECT_TRUE(driver.live_.empty());
  pages.release(0, base, 64 * kLarge);
}

TEST_F(VmmPagesTest, OutOfMemoryWhileCreatingCellsLeavesNothing) {
  const uintptr_t base = pages.reserve(0, 64 * kLarge, 0);
  driver.fail_create_in_ = 2;  // the second cell
  EXPECT_FALSE(pages.map(0, base, 30 * kPage, kPage, PageCells{kLarge, 3}));
  EXPECT_TRUE(driver.live_.empty());
  EXPECT_TRUE(driver.mapped_.empty());
  EXPECT_EQ(pages.mapped_pages(0), 0u);
  EXPECT_TRUE(pages.map(0, base, 30 * kPage, kPage, PageCells{kLarge, 3}));
  EXPECT_EQ(driver.live_.size(), 3u);
}

TEST_F(VmmPagesTest, OutOfMemoryHalfwayThroughCreatesLeavesNothingAndReportsFalse) {
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  driver.fail_create_in_ = 3;  // the third page of four
  EXPECT_FALSE(pages.map(0, base, 4 * kPage, kPage));
  EXPECT_TRUE(driver.live_.empty());
  EXPECT_TRUE(driver.mapped_.empty());
  EXPECT_EQ(pages.mapped_pages(0), 0u);
  // The range is still usable afterwards.
  EXPECT_TRUE(pages.map(0, base, 4 * kPage, kPage));
  EXPECT_EQ(pages.mapped_pages(0), 4u);
}

TEST_F(VmmPagesTest, DeviceFullReportsFalseWithNothingLeft) {
  driver.free_bytes_ = 5 * kLarge;
  const uintptr_t base = pages.reserve(0, 64 * kLarge, 0);
  ASSERT_TRUE(pages.map(0, base, 4 * kLarge, kLarge));
  EXPECT_FALSE(pages.map(0, base + 4 * kLarge, 2 * kLarge, kLarge));
  EXPECT_EQ(driver.live_.size(), 4u);
  EXPECT_EQ(driver.free_bytes_, kLarge);
}

TEST_F(VmmPagesTest, MapOutOfMemoryHalfwayUnmapsAndReleasesEveryPageOfTheGrowth) {
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, kPage, kPage));
  driver.fail_map_in_ = 3;
  EXPECT_FALSE(pages.map(0, base + kPage, 4 * kPage, kPage));
  EXPECT_EQ(driver.live_.size(), 1u);  // the earlier page only
  EXPECT_EQ(driver.mapped_.size(), 1u);
  EXPECT_EQ(pages.mapped_pages(0), 1u);
  // Pages mapped a moment ago were never used: no stream to wait for.
  EXPECT_EQ(driver.syncs_, 0);
}

TEST_F(VmmPagesTest, OtherMapFailureThrowsWithNothingLeft) {
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, 3 * kPage, kPage));
  driver.fail_map_in_ = 2;
  driver.map_error_ = "cuMemMap: CUDA_ERROR_INVALID_VALUE";
  try {
    pages.map(0, base + 3 * kPage, 2 * kPage, kPage);
    FAIL() << "expected BackendError";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << e.what();
  }
  EXPECT_EQ(driver.live_.size(), 3u);
  EXPECT_EQ(driver.mapped_.size(), 3u);
  EXPECT_EQ(pages.mapped_pages(0), 3u);
  // Not a handle-type refusal: the type stays.
  EXPECT_EQ(pages.handle_type(), ShareableHandle::kFabric);
}

TEST_F(VmmPagesTest, OtherCreateFailureOnceSettledThrowsWithNothingLeft) {
  driver.refuse_fabric_ = true;
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, kPage, kPage));  // settles on POSIX descriptors
  driver.fail_create_in_ = 2;
  driver.create_error_ = "cuMemCreate: CUDA_ERROR_UNKNOWN";
  EXPECT_THROW(pages.map(0, base + kPage, 3 * kPage, kPage), BackendError);
  EXPECT_EQ(driver.live_.size(), 1u);
  EXPECT_EQ(pages.mapped_pages(0), 1u);
}

TEST_F(VmmPagesTest, FabricIsTriedFirstAndTheFirstRefusalSettlesOnPosixDescriptors) {
  driver.refuse_fabric_ = true;
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  EXPECT_EQ(pages.handle_type(), ShareableHandle::kFabric);
  ASSERT_TRUE(pages.map(0, base, 2 * kPage, kPage));
  EXPECT_EQ(pages.handle_type(), ShareableHandle::kPosixFd);
  ASSERT_TRUE(pages.map(0, base + 2 * kPage, kPage, kPage));
  // One fabric attempt, then POSIX descriptors for every page since.
  EXPECT_EQ(driver.types_, (std::vector<ShareableHandle>{ShareableHandle::kFabric,
                                                        ShareableHandle::kPosixFd,
                                                        ShareableHandle::kPosixFd,
                                                        ShareableHandle::kPosixFd}));
}

TEST_F(VmmPagesTest, FabricStaysWhereTheDriverAcceptsIt) {
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, kPage, kPage));
  ASSERT_TRUE(pages.map(0, base + kPage, kPage, kPage));
  EXPECT_EQ(pages.handle_type(), ShareableHandle::kFabric);
  EXPECT_EQ(std::count(driver.types_.begin(), driver.types_.end(), ShareableHandle::kFabric), 2);
}

TEST(VmmPagesIpcOff, PagesRequestNoShareableHandle) {
  ScoringDriver driver;
  VmmPages pages(driver, /*ipc_handles=*/false);
  const uintptr_t base = pages.reserve(0, 8 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, 2 * kPage, kPage));
  EXPECT_EQ(driver.types_,
            (std::vector<ShareableHandle>{ShareableHandle::kNone, ShareableHandle::kNone}));
}

TEST_F(VmmPagesTest, UnmapWaitsForTheSegmentsStreamBeforeTheFirstUnmap) {
  const uintptr_t base = pages.reserve(0, 64 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, 4 * kPage, kPage));
  pages.unmap(0, base + kPage, 2 * kPage, kPage, 0, /*stream=*/0x1234);
  EXPECT_EQ(driver.synced_, (std::vector<StreamId>{0x1234}));
  EXPECT_EQ(driver.order_, (std::vector<std::string>{"sync", "unmap", "unmap"}));
  EXPECT_EQ(driver.live_.size(), 2u);
  EXPECT_EQ(pages.mapped_pages(0), 2u);
  // The gap can be mapped again.
  EXPECT_TRUE(pages.map(0, base + kPage, 2 * kPage, kPage));
}

TEST_F(VmmPagesTest, BadRangesAreRefusedNamingTheProblem) {
  const uintptr_t base = pages.reserve(0, 8 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, kPage, kPage));
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const BackendError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { pages.map(0, base, kPage, kPage); }).find("already mapped"), std::string::npos);
  EXPECT_NE(message([&] { pages.map(0, base + 1, kPage, kPage); }).find("not whole pages"), std::string::npos);
  EXPECT_NE(message([&] { pages.map(0, base + 7 * kPage, 2 * kPage, kPage); }).find("runs past"), std::string::npos);
  EXPECT_NE(message([&] { pages.map(1, base + kPage, kPage, kPage); }).find("device 1"), std::string::npos);
  EXPECT_NE(message([&] { pages.map(0, base + 2 * kPage, 2 * kPage, 2 * kPage); }).find("pages of"), std::string::npos);
  EXPECT_NE(message([&] { pages.unmap(0, base + kPage, kPage, kPage, 0, 0); }).find("not mapped"), std::string::npos);
  EXPECT_NE(message([&] { pages.release(0, base, 8 * kPage); }).find("1 pages still mapped"), std::string::npos);
  EXPECT_NE(message([&] { pages.map(0, 12345, kPage, kPage); }).find("not in a reserved"), std::string::npos);
  EXPECT_EQ(driver.live_.size(), 1u);
}

TEST_F(VmmPagesTest, ReleasingARangeFreesItsAddressSpace) {
  const uintptr_t base = pages.reserve(0, 8 * kPage, 0);
  ASSERT_TRUE(pages.map(0, base, 3 * kPage, kPage));
  pages.unmap(0, base, 3 * kPage, kPage, 0, 0);
  pages.release(0, base, 8 * kPage);
  EXPECT_TRUE(driver.reserved_.empty());
  EXPECT_TRUE(driver.live_.empty());
  EXPECT_EQ(pages.reserved_ranges(), 0u);
}

TEST_F(VmmPagesTest, APeerGetsAccessToEveryMappedRunAndToLaterGrowths) {
  const uintptr_t small = pages.reserve(0, 64 * kPage, 0);
  const uintptr_t large = pages.reserve(0, 64 * kLarge, 0);
  const uintptr_t other = pages.reserve(1, 64 * kPage, 0);
  ASSERT_TRUE(pages.map(0, small, 2 * kPage, kPage));
  ASSERT_TRUE(pages.map(0, small + 5 * kPage, kPage, kPage));  // a second run
  ASSERT_TRUE(pages.map(0, large, 3 * kLarge, kLarge));
  ASSERT_TRUE(pages.map(1, other, kPage, kPage));
  driver.accesses_.clear();

  pages.add_peer(0, 1);  // device 1 may access device 0's memory
  using A = ScoringDriver::Access;
  EXPECT_EQ(driver.accesses_, (std::vector<A>{{small, 2 * kPage, 1},
                                              {small + 5 * kPage, kPage, 1},
                                              {large, 3 * kLarge, 1}}));
  EXPECT_EQ(pages.peers(0), (std::vector<int>{1}));
  EXPECT_TRUE(pages.peers(1).empty());

  driver.accesses_.clear();
  pages.add_peer(0, 1);  // again: nothing
  pages.add_peer(0, 0);  // the device itself: nothing
  EXPECT_TRUE(driver.accesses_.empty());
  EXPECT_EQ(pages.peers(0), (std::vector<int>{1}));

  ASSERT_TRUE(pages.map(0, small + 2 * kPage, kPage, kPage));
  EXPECT_EQ(driver.accesses_, (std::vector<A>{{small + 2 * kPage, kPage, 0},
                                              {small + 2 * kPage, kPage, 1}}));
  driver.accesses_.clear();
  ASSERT_TRUE(pages.map(1, other + kPage, kPage, kPage));  // device 1 has no peers
  EXPECT_EQ(driver.accesses_, (std::vector<A>{{other + kPage, kPage, 1}}));
}

}  // namespace
}  // namespace cachealloc
