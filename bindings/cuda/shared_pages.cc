#include "bindings/cuda/shared_pages.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "allocator/base/errors.h"

// Older C libraries lack the numbers; the kernel may still have the calls.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace cachealloc {
namespace {

constexpr size_t kHeaderBytes = 24;
constexpr size_t kFabricBytes = 64;  // sizeof(CUmemFabricHandle)
// More pages than any device holds (1 M pages of 2 MiB is 2 TiB): a count
// past it is a malformed header, not a request to allocate.
constexpr uint64_t kMostPages = uint64_t{1} << 20;

[[noreturn]] void fail(const std::string& what) {
  throw BackendError("cachealloc: opening a shared expandable segment: " + what);
}

std::string kernel_lacks(const char* call) {
  return std::string("the kernel on this machine does not support the ") + call +
         " syscall needed to use IPC for CUDA tensors when expandable_segments:True is set. "
         "Consider using expandable_segments:False via "
         "torch.cuda.memory._set_allocator_settings('expandable_segments:False') for this "
         "allocation.";
}

// Owns a descriptor for the scope.
struct Fd {
  long fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(static_cast<int>(fd));
  }
};

void release_all(VmmDriver& driver, int device, const std::vector<uint64_t>& handles) noexcept {
  for (uint64_t h : handles) {
    try {
      driver.release(device, h);
    } catch (const std::exception&) {
      // Keep releasing the rest; the failure being reported matters more.
    }
  }
}

std::vector<uint64_t> import_handles(VmmDriver& driver, int device, std::string_view handles,
                                     size_t count, int32_t pid, ShareableHandle type) {
  std::vector<uint64_t> out;
  out.reserve(count);
  try {
    if (type == ShareableHandle::kFabric) {
      for (size_t i = 0; i < count; ++i)
        out.push_back(driver.import_handle(device, handles.data() + i * kFabricBytes, type));
      return out;
    }
    Fd process{::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)};
    if (process.fd < 0)
      fail(errno == ENOSYS ? kernel_lacks("pidfd_open")
                           : "pidfd_open of process " + std::to_string(pid) + ": " +
                                 std::strerror(errno));
    for (size_t i = 0; i < count; ++i) {
      int theirs = -1;
      std::memcpy(&theirs, handles.data() + i * sizeof(int), sizeof theirs);
      Fd mine{::syscall(SYS_pidfd_getfd, static_cast<int>(process.fd), theirs, 0)};
      if (mine.fd < 0)
        fail(errno == ENOSYS ? kernel_lacks("pidfd_getfd")
                             : "pidfd_getfd of descriptor " + std::to_string(theirs) +
                                   " of process " + std::to_string(pid) + ": " +
                                   std::strerror(errno));
      const int fd = static_cast<int>(mine.fd);
      out.push_back(driver.import_handle(device, &fd, type));
    }
  } catch (...) {
    release_all(driver, device, out);
    throw;
  }
  return out;
}

}  // namespace

ImportedPages import_shared_pages(VmmDriver& driver, int device, std::string_view bytes,
                                  ShareableHandle type, const std::vector<int>& peers) {
  if (bytes.size() < kHeaderBytes)
    fail("its description has " + std::to_string(bytes.size()) + " bytes, fewer than a header's " +
         std::to_string(kHeaderBytes));
  int32_t pid = 0;
  uint64_t page = 0, count = 0;
  std::memcpy(&pid, bytes.data(), sizeof pid);
  std::memcpy(&page, bytes.data() + 8, sizeof page);
  std::memcpy(&count, bytes.data() + 16, sizeof count);
  if (page == 0 || count == 0 || count > kMostPages || page > (uint64_t{1} << 40))
    fail("a header of " + std::to_string(count) + " pages of " + std::to_string(page) +
         " bytes is not one a process writes");
  const size_t each = type == ShareableHandle::kFabric ? kFabricBytes : sizeof(int);
  if (bytes.size() != kHeaderBytes + count * each)
    fail("its description has " + std::to_string(bytes.size()) + " bytes; " +
         std::to_string(count) + " " + shareable_handle_name(type) + " handles take " +
         std::to_string(kHeaderBytes + count * each));

  ImportedPages pages;
  pages.device = device;
  pages.page_bytes = static_cast<size_t>(page);
  pages.handles = import_handles(driver, device, bytes.substr(kHeaderBytes), count, pid, type);
  size_t mapped = 0;
  try {
    // Alignment 0: the driver's granularity, as for our own ranges (the
    // large pool's 20 MiB page is no power of two, which the driver refuses
    // as an alignment).
    pages.base = driver.reserve(device, pages.bytes(), 0);
    for (; mapped < pages.handles.size(); ++mapped) {
      std::string error;
      const VmmStatus s = driver.map(device, pages.base + mapped * pages.page_bytes,
                                     pages.page_bytes, pages.handles[mapped], &error);
      if (s != VmmStatus::kOk) fail(s == VmmStatus::kOutOfMemory ? "cuMemMap: out of memory" : error);
    }
    driver.set_access(device, pages.base, pages.bytes(), device);
    for (int p : peers) driver.set_access(device, pages.base, pages.bytes(), p);
  } catch (...) {
    try {
      for (size_t k = 0; k < mapped; ++k)
        driver.unmap(device, pages.base + k * pages.page_bytes, pages.page_bytes);
      if (pages.base) driver.free_range(device, pages.base, pages.bytes());
    } catch (const std::exception&) {
      // The failure being reported matters more than one in the clean-up.
    }
    release_all(driver, device, pages.handles);
    throw;
  }
  return pages;
}

void close_imported_pages(VmmDriver& driver, const ImportedPages& pages) noexcept {
  // Each step is tried whatever the one before did (a failed wait, after a
  // kernel fault, must not leave the range mapped and reserved for good).
  auto attempt = [](auto&& step) {
    try {
      step();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cachealloc: closing a shared expandable segment: %s\n", e.what());
    }
  };
  // Kernels may still use the pages; unmapping does not wait for them.
  attempt([&] { driver.synchronize_device(pages.device); });
  for (size_t k = 0; k < pages.handles.size(); ++k)
    attempt([&] { driver.unmap(pages.device, pages.base + k * pages.page_bytes, pages.page_bytes); });
  attempt([&] { driver.free_range(pages.device, pages.base, pages.bytes()); });
  release_all(driver, pages.device, pages.handles);
}

}  // namespace cachealloc
