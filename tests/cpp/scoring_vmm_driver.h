// A fake VmmDriver for the page bookkeeping's tests (vmm_pages_test,
// shared_pages_test): it keeps score of every handle, mapping and access
// grant, and fails where a test asks it to.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "allocator/base/errors.h"
#include "bindings/cuda/vmm_driver.h"

namespace cachealloc::testing {

// A device's view of the driver: live handles, mappings and access, and
// one-shot faults: the n-th create/map from now fails (n = 1: the next).
class ScoringDriver final : public VmmDriver {
 public:
  struct Access {
    uintptr_t address;
    size_t bytes;
    int accessor;
    bool operator==(const Access&) const = default;
  };

  uintptr_t reserve(int, size_t bytes, size_t) override {
    const uintptr_t base = next_base_;
    next_base_ += (bytes + (uintptr_t{1} << 30)) & ~((uintptr_t{1} << 30) - 1);
    reserved_[base] = bytes;
    return base;
  }
  void free_range(int, uintptr_t base, size_t bytes) override {
    ASSERT_EQ(reserved_.at(base), bytes);
    reserved_.erase(base);
  }
  VmmStatus create(int, size_t bytes, ShareableHandle type, uint64_t* handle,
                   std::string* error) override {
    types_.push_back(type);
    if (type == ShareableHandle::kFabric && refuse_fabric_) {
      *error = "fabric handles not supported";
      return VmmStatus::kFailed;
    }
    if (fail_create_in_ && --fail_create_in_ == 0) {
      if (create_error_.empty()) return VmmStatus::kOutOfMemory;
      *error = create_error_;
      return VmmStatus::kFailed;
    }
    if (bytes > free_bytes_) return VmmStatus::kOutOfMemory;
    free_bytes_ -= bytes;
    *handle = next_handle_++;
    live_[*handle] = bytes;
    return VmmStatus::kOk;
  }
  void release(int, uint64_t handle) override {
    ASSERT_EQ(live_.count(handle), 1u) << "release of unknown handle " << handle;
    ASSERT_EQ(std::count_if(mapped_.begin(), mapped_.end(),
                            [&](const auto& m) { return m.second == handle; }),
              0)
        << "released while mapped";
    free_bytes_ += live_.at(handle);
    live_.erase(handle);
  }
  VmmStatus map(int, uintptr_t address, size_t bytes, uint64_t handle,
                std::string* error) override {
    if (fail_map_in_ && --fail_map_in_ == 0) {
      if (map_error_.empty()) return VmmStatus::kOutOfMemory;
      *error = map_error_;
      return VmmStatus::kFailed;
    }
    EXPECT_EQ(live_.at(handle), bytes);
    EXPECT_TRUE(mapped_.emplace(address, handle).second) << "mapped twice";
    ++maps_;
    return VmmStatus::kOk;
  }
  void unmap(int, uintptr_t address, size_t) override {
    EXPECT_EQ(mapped_.erase(address), 1u) << "unmap of an unmapped page";
    order_.push_back("unmap");
  }
  void set_access(int, uintptr_t address, size_t bytes, int accessor) override {
    accesses_.push_back({address, bytes, accessor});
  }
  void synchronize(int, StreamId stream) override {
    ++syncs_;
    synced_.push_back(stream);
    order_.push_back("sync");
  }
  // A POSIX "export" is a real descriptor (a memfd whose size is the
  // handle), so that closing it and copying it between processes work.
  void export_handle(int, uint64_t handle, ShareableHandle type, std::string* out) override {
    ASSERT_EQ(type, ShareableHandle::kPosixFd);
    const int fd = static_cast<int>(::syscall(SYS_memfd_create, "vmm-page", 0));
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(handle)), 0);
    exported_fds_.push_back(fd);
    out->append(reinterpret_cast<const char*>(&fd), sizeof fd);
  }
  uint64_t import_handle(int, const void* shareable, ShareableHandle type) override {
    EXPECT_EQ(type, ShareableHandle::kPosixFd);
    struct stat st{};
    EXPECT_EQ(::fstat(*static_cast<const int*>(shareable), &st), 0);
    const uint64_t original = static_cast<uint64_t>(st.st_size);
    const uint64_t h = next_handle_++;
    live_[h] = live_.at(original);  // a second handle to the same memory
    imported_from_.push_back(original);
    return h;
  }
  void synchronize_device(int) override {
    order_.push_back("sync device");
    if (fail_device_sync_) throw BackendError("cudaDeviceSynchronize: an illegal memory access");
  }
  bool fail_device_sync_ = false;

  size_t free_bytes_ = size_t{1} << 30;  // physical memory left
  int fail_create_in_ = 0;
  std::string create_error_;  // empty: the failing create is out of memory
  int fail_map_in_ = 0;
  std::string map_error_;
  bool refuse_fabric_ = false;

  std::map<uint64_t, size_t> live_;          // handle -> bytes
  std::map<uintptr_t, uint64_t> mapped_;     // address -> handle
  std::map<uintptr_t, size_t> reserved_;
  std::vector<Access> accesses_;
  std::vector<ShareableHandle> types_;
  std::vector<StreamId> synced_;
  std::vector<std::string> order_;
  int syncs_ = 0;
  int maps_ = 0;
  std::vector<int> exported_fds_;
  std::vector<uint64_t> imported_from_;

 private:
  uintptr_t next_base_ = uintptr_t{1} << 40;
  uint64_t next_handle_ = 1;
};

}  // namespace cachealloc::testing
