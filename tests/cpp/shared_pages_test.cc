// CUDA IPC of expandable segments' pages: what VmmPages::share writes
// (native 2.11's description: header, then one exported handle per page
// around the shared range) and what import_shared_pages makes of it, on the
// scoring driver, whose exported handles are real descriptors.
#include "bindings/cuda/shared_pages.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "allocator/base/errors.h"
#include "bindings/cuda/vmm_pages.h"
#include "tests/cpp/scoring_vmm_driver.h"

namespace cachealloc {
namespace {

using testing::ScoringDriver;
constexpr size_t kPage = size_t{2} << 20;

struct Header {
  int32_t pid;
  uint64_t page, count;
};
Header header_of(const std::string& d) {
  Header h{};
  std::memcpy(&h.pid, d.data(), 4);
  std::memcpy(&h.page, d.data() + 8, 8);
  std::memcpy(&h.count, d.data() + 16, 8);
  return h;
}
bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

class SharedPagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver.refuse_fabric_ = true;  // as on a machine without fabric: POSIX descriptors
    base = pages.reserve(0, 64 * kPage, 0);
    ASSERT_TRUE(pages.map(0, base, 4 * kPage, kPage));
  }
  ScoringDriver driver;
  VmmPages pages{driver, /*ipc_handles=*/true};
  uintptr_t base = 0;
};

TEST_F(SharedPagesTest, ShareDescribesEveryPageTheRangeTouchesWithNativesHeader) {
  std::string d;
  // [base + 1 page + 100, +2 pages) touches pages 1, 2 and 3.
  EXPECT_EQ(pages.share(0, base + kPage + 100, 2 * kPage, &d), base + kPage);
  ASSERT_EQ(d.size(), 24u + 3 * sizeof(int));
  const Header h = header_of(d);
  EXPECT_EQ(h.pid, ::getpid());
  EXPECT_EQ(h.page, kPage);
  EXPECT_EQ(h.count, 3u);
  int32_t padding = -1;
  std::memcpy(&padding, d.data() + 4, 4);
  EXPECT_EQ(padding, 0);  // zeroed: the bytes are a cache key
  // A page is exported once: sharing again gives the same bytes.
  std::string again;
  pages.share(0, base + kPage + 100, 2 * kPage, &again);
  EXPECT_EQ(again, d);
  EXPECT_EQ(driver.exported_fds_.size(), 3u);
}

TEST_F(SharedPagesTest, AnExportedDescriptorIsClosedWhenItsPageIsUnmapped) {
  std::string d;
  pages.share(0, base + 3 * kPage, kPage, &d);
  ASSERT_EQ(driver.exported_fds_.size(), 1u);
  const int fd = driver.exported_fds_[0];
  EXPECT_TRUE(is_open(fd));
  pages.unmap(0, base + 2 * kPage, 2 * kPage, kPage, 0, 0);
  EXPECT_FALSE(is_open(fd));
}

TEST_F(SharedPagesTest, SharingUnmappedPagesOrPagesWithoutHandlesIsRefusedByName) {
  std::string d;
  EXPECT_THROW(
      {
        try {
          pages.share(0, base + 3 * kPage, 2 * kPage, &d);
        } catch (const BackendError& e) {
          EXPECT_NE(std::string(e.what()).find("not mapped"), std::string::npos) << e.what();
          throw;
        }
      },
      BackendError);
  VmmPages plain(driver, /*ipc_handles=*/false);
  const uintptr_t b = plain.reserve(0, 8 * kPage, 0);
  ASSERT_TRUE(plain.map(0, b, kPage, kPage));
  EXPECT_THROW(plain.share(0, b, kPage, &d), BackendError);
  plain.unmap(0, b, kPage, kPage, 0, 0);
  plain.release(0, b, 8 * kPage);
}

TEST_F(SharedPagesTest, ImportMapsTheSamePagesAtANewBaseAndCloseUndoesIt) {
  std::string d;
  pages.share(0, base + kPage, 2 * kPage, &d);
  ImportedPages in;
  try {
    in = import_shared_pages(driver, 0, d, ShareableHandle::kPosixFd, {1});
  } catch (const BackendError& e) {
    // pidfd_getfd needs Linux 5.6 and the right to trace: a sandbox may
    // forbid it (native needs the same).
    const std::string what = e.what();
    if (what.find("pidfd") != std::string::npos) GTEST_SKIP() << what;
    throw;
  }
  EXPECT_EQ(in.page_bytes, kPage);
  ASSERT_EQ(in.handles.size(), 2u);
  EXPECT_NE(in.base, base);
  // The imported handles are the exported pages, in order.
  EXPECT_EQ(driver.imported_from_, (std::vector<uint64_t>{driver.mapped_.at(base + kPage),
                                                          driver.mapped_.at(base + 2 * kPage)}));
  EXPECT_EQ(driver.mapped_.at(in.base + kPage), in.handles[1]);
  // Access for the device and the peer, over the whole range.
  EXPECT_EQ(driver.accesses_.back(), (ScoringDriver::Access{in.base, 2 * kPage, 1}));
  const size_t live = driver.live_.size();
  close_imported_pages(driver, in);
  EXPECT_EQ(driver.order_.back(), "unmap");
  EXPECT_EQ(driver.live_.size(), live - 2);
  EXPECT_FALSE(driver.mapped_.contains(in.base));
  EXPECT_FALSE(driver.reserved_.contains(in.base));
}

TEST_F(SharedPagesTest, ClosingAfterAFailedWaitStillUnmapsReleasesAndFreesTheRange) {
  std::string d;
  pages.share(0, base, 2 * kPage, &d);
  ImportedPages in;
  try {
    in = import_shared_pages(driver, 0, d, ShareableHandle::kPosixFd, {});
  } catch (const BackendError& e) {
    GTEST_SKIP() << e.what();  // no pidfd_getfd here (see above)
  }
  const size_t live = driver.live_.size();
  driver.fail_device_sync_ = true;  // a sticky error after a kernel fault
  close_imported_pages(driver, in);
  EXPECT_EQ(driver.live_.size(), live - 2);
  EXPECT_FALSE(driver.mapped_.contains(in.base));
  EXPECT_FALSE(driver.reserved_.contains(in.base));
}

TEST_F(SharedPagesTest, AnImportThatFailsPartWayLeavesNothingImportedMappedOrReserved) {
  std::string d;
  pages.share(0, base, 3 * kPage, &d);
  const size_t live = driver.live_.size();
  const size_t mapped = driver.mapped_.size();
  const size_t reserved = driver.reserved_.size();
  driver.fail_map_in_ = 2;  // the second page's map fails
  driver.map_error_ = "cuMemMap: invalid value";
  try {
    import_shared_pages(driver, 0, d, ShareableHandle::kPosixFd, {});
    ADD_FAILURE() << "imported";
  } catch (const BackendError& e) {
    const std::string what = e.what();
    if (what.find("pidfd") != std::string::npos) GTEST_SKIP() << what;
    EXPECT_NE(what.find("cuMemMap"), std::string::npos) << what;
  }
  EXPECT_EQ(driver.live_.size(), live);
  EXPECT_EQ(driver.mapped_.size(), mapped);
  EXPECT_EQ(driver.reserved_.size(), reserved);
}

TEST(SharedPagesInput, MalformedDescriptionsAreRefusedByName) {
  ScoringDriver driver;
  auto refused = [&](const std::string& d, const char* words) {
    try {
      import_shared_pages(driver, 0, d, ShareableHandle::kPosixFd, {});
      ADD_FAILURE() << "accepted";
    } catch (const BackendError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(std::string(10, '\0'), "fewer than a header");
  std::string d(24, '\0');
  refused(d, "is not one a process writes");  // no pages
  const uint64_t page = kPage, count = 2;
  std::memcpy(d.data() + 8, &page, 8);
  std::memcpy(d.data() + 16, &count, 8);
  refused(d, "2 POSIX file descriptor handles take 32");
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(d.data() + 16, &huge, 8);
  refused(d, "is not one a process writes");
  EXPECT_TRUE(driver.live_.empty());
  EXPECT_TRUE(driver.reserved_.empty());
}

}  // namespace
}  // namespace cachealloc
