#include "bindings/cuda/vmm_pages.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "allocator/base/errors.h"
#include "allocator/base/page_handles.h"

namespace cachealloc {
namespace {

std::string hex(uintptr_t v) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[v & 15]);
    v >>= 4;
  } while (v);
  return "0x" + out;
}

[[noreturn]] void fail(const std::string& what) {
  throw BackendError("cachealloc: expandable segments: " + what);
}

}  // namespace

const char* shareable_handle_name(ShareableHandle type) {
  switch (type) {
    case ShareableHandle::kNone: return "none";
    case ShareableHandle::kPosixFd: return "POSIX file descriptor";
    case ShareableHandle::kFabric: return "fabric";
  }
  return "?";
}

void VmmDriver::export_handle(int, uint64_t, ShareableHandle, std::string*) {
  fail("this driver cannot export pages");
}
uint64_t VmmDriver::import_handle(int, const void*, ShareableHandle) {
  fail("this driver cannot import pages");
}
void VmmDriver::synchronize_device(int) { fail("this driver cannot synchronize a device"); }

VmmPages::VmmPages(VmmDriver& driver, bool ipc_handles)
    : driver_(driver), choice_(ipc_handles ? HandleChoice::kUntried : HandleChoice::kNone) {}

uintptr_t VmmPages::reserve(int device, size_t bytes, size_t alignment) {
  if (bytes == 0) fail("cannot reserve an empty address range");
  const uintptr_t base = driver_.reserve(device, bytes, alignment);
  std::lock_guard<std::mutex> lock(mutex_);
  Range& r = ranges_[base];
  r.device = device;
  r.bytes = bytes;
  return base;
}

void VmmPages::release(int device, uintptr_t base, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = ranges_.find(base);
    if (it == ranges_.end() || it->second.device != device)
      fail("release of " + hex(base) + ", not an address range reserved on device " +
           std::to_string(device));
    if (it->second.bytes != bytes)
      fail("release of " + hex(base) + " with " + std::to_string(bytes) + " bytes; " +
           std::to_string(it->second.bytes) + " were reserved");
    const auto& m = it->second.mapped;
    if (const size_t n = static_cast<size_t>(std::count(m.begin(), m.end(), true)))
      fail("release of " + hex(base) + " with " + std::to_string(n) + " pages still mapped");
    ranges_.erase(it);
  }
  driver_.free_range(device, base, bytes);
}

VmmPages::Range& VmmPages::range_of(int device, uintptr_t address, size_t bytes,
                                    size_t page_bytes, uintptr_t* base) {
  auto it = ranges_.upper_bound(address);
  if (it == ranges_.begin()) fail(hex(address) + " is not in a reserved address range");
  --it;
  Range& r = it->second;
  *base = it->first;
  if (r.device != device || address - it->first >= r.bytes)
    fail(hex(address) + " is not in an address range reserved on device " + std::to_string(device));
  if (page_bytes == 0 || bytes % page_bytes != 0 || (address - it->first) % page_bytes != 0)
    fail("[" + hex(address) + ", +" + std::to_string(bytes) + ") is not whole pages of " +
         std::to_string(page_bytes) + " bytes");
  if (bytes > r.bytes - (address - it->first))
    fail("[" + hex(address) + ", +" + std::to_string(bytes) + ") runs past its reserved range");
  if (r.page_bytes != 0 && r.page_bytes != page_bytes)
    fail("pages of " + std::to_string(page_bytes) + " bytes in a range mapped with pages of " +
         std::to_string(r.page_bytes));
  return r;
}

std::vector<int>& VmmPages::peers_of(int device) { return peers_[device]; }

bool VmmPages::map(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                   PageCells cells) {
  std::lock_guard<std::mutex> lock(mutex_);
  uintptr_t base = 0;
  Range& r = range_of(device, address, bytes, page_bytes, &base);
  if (!valid_cells(bytes, page_bytes, cells))
    fail(std::to_string(cells.count) + " cells of " + std::to_string(cells.bytes) +
         " bytes are not whole pages of " + std::to_string(page_bytes) + " bytes inside [" +
         hex(address) + ", +" + std::to_string(bytes) + ")");
  if (bytes == 0) return true;
  const size_t first = (address - base) / page_bytes;
  const size_t last = first + bytes / page_bytes;
  for (size_t i = first; i < std::min(last, r.mapped.size()); ++i)
    if (r.mapped[i]) fail("page at " + hex(base + i * page_bytes) + " is already mapped");

  std::string error;
  bool refused = false;  // cuMemCreate refused the handle type
  VmmStatus status;
  // Native's handle type: fabric while untried; the first cuMemCreate that
  // refuses a fabric page other than for lack of memory settles on POSIX
  // descriptors for the process.
  if (choice_ == HandleChoice::kUntried) {
    status = grow(r, base, first, last, page_bytes, cells, ShareableHandle::kFabric, &error,
                  &refused);
    if (status == VmmStatus::kFailed && refused) {
      choice_ = HandleChoice::kPosixFd;
      status = grow(r, base, first, last, page_bytes, cells, ShareableHandle::kPosixFd,
                    &error, &refused);
    } else {
      choice_ = HandleChoice::kFabric;
    }
  } else {
    const ShareableHandle type = choice_ == HandleChoice::kFabric    ? ShareableHandle::kFabric
                                 : choice_ == HandleChoice::kPosixFd ? ShareableHandle::kPosixFd
                                                                     : ShareableHandle::kNone;
    status = grow(r, base, first, last, page_bytes, cells, type, &error, &refused);
  }
  if (status == VmmStatus::kFailed) fail(error);
  if (status == VmmStatus::kOutOfMemory) return false;
  r.page_bytes = page_bytes;
  return true;
}

VmmStatus VmmPages::grow(Range& r, uintptr_t base, size_t first, size_t last,
                         size_t page_bytes, PageCells cells, ShareableHandle type,
                         std::string* error, bool* refused) {
  const int device = r.device;
  *refused = false;
  const uintptr_t address = base + first * page_bytes;
  const size_t bytes = (last - first) * page_bytes;
  std::vector<Made> made;
  made.reserve(page_handle_count(bytes, page_bytes, cells));
  size_t mapped = 0;
  VmmStatus status = VmmStatus::kOk;
  try {
    // The cells first (one handle each), then one handle per page.
    for_each_page_handle(address, bytes, page_bytes, cells, [&](uintptr_t at, size_t n) {
      if (status != VmmStatus::kOk) return;
      uint64_t h = 0;
      status = driver_.create(device, n, type, &h, error);
      if (status == VmmStatus::kOk) made.push_back({at, n, h});
      *refused = status == VmmStatus::kFailed;
    });
    // One map per handle, after every handle exists (as native).
    for (size_t k = 0; k < made.size() && status == VmmStatus::kOk; ++k) {
      status = driver_.map(device, made[k].address, made[k].bytes, made[k].handle, error);
      if (status == VmmStatus::kOk) ++mapped;
    }
    if (status == VmmStatus::kOk) {
      driver_.set_access(device, address, bytes, device);
      for (int peer : peers_of(device)) driver_.set_access(device, address, bytes, peer);
    }
  } catch (const std::exception& e) {
    undo(device, made, mapped);
    *error = e.what();
    return VmmStatus::kFailed;
  }
  if (status != VmmStatus::kOk) {
    undo(device, made, mapped);
    return status;
  }
  if (r.mapped.size() < last) {
    r.mapped.resize(last, false);
    r.handles.resize(last, 0);
    r.span.resize(last, 0);
    r.exported.resize(last);
  }
  r.type = type;
  for (const Made& m : made) {
    const size_t i = (m.address - base) / page_bytes, n = m.bytes / page_bytes;
    r.handles[i] = m.handle;
    r.span[i] = static_cast<uint32_t>(n);
    for (size_t k = i; k < i + n; ++k) r.mapped[k] = true;
  }
  return VmmStatus::kOk;
}

void VmmPages::undo(int device, const std::vector<Made>& made, size_t mapped) noexcept {
  for (size_t k = 0; k < made.size(); ++k) {
    try {
      if (k < mapped) driver_.unmap(device, made[k].address, made[k].bytes);
      driver_.release(device, made[k].handle);
    } catch (const std::exception&) {
      // Keep undoing the rest; the caller reports the failure that led here.
    }
  }
}

void VmmPages::unmap(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                     size_t cell_bytes, StreamId stream) {
  uintptr_t base = 0;
  size_t first = 0, last = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    (void)cell_bytes;  // each handle's own size is known here
    Range& r = range_of(device, address, bytes, page_bytes, &base);
    first = (address - base) / page_bytes;
    last = first + bytes / page_bytes;
    for (size_t i = first; i < last; ++i)
      if (i >= r.mapped.size() || !r.mapped[i])
        fail("unmap of " + hex(base + i * page_bytes) + ", a page that is not mapped");
    // Whole handles only: the range starts at a handle and its last handle
    // ends at its end (cuMemUnmap cannot take part of a mapping).
    for (size_t i = first; i < last; i += r.span[i])
      if (r.span[i] == 0 || i + r.span[i] > last)
        fail("unmap of [" + hex(address) + ", +" + std::to_string(bytes) +
             ") cuts the handle at or before " + hex(base + i * page_bytes));
  }
  if (bytes == 0) return;
  // Kernels still queued on the segment's stream may use these pages;
  // cuMemUnmap/cuMemRelease do not wait for them (native synchronizes too).
  driver_.synchronize(device, stream);
  std::lock_guard<std::mutex> lock(mutex_);
  Range& r = ranges_.at(base);
  for (size_t i = first; i < last;) {
    const size_t n = r.span[i];
    driver_.unmap(device, base + i * page_bytes, n * page_bytes);
    for (size_t k = i; k < i + n; ++k) r.mapped[k] = false;  // the handle alone is left
    close_exported(r, i);
    driver_.release(device, r.handles[i]);
    r.span[i] = 0;
    i += n;
  }
  while (!r.mapped.empty() && !r.mapped.back()) {
    r.mapped.pop_back();
    r.handles.pop_back();
    r.span.pop_back();
    r.exported.pop_back();
  }
}

void VmmPages::close_exported(Range& r, size_t page) noexcept {
  std::string& e = r.exported[page];
  if (r.type == ShareableHandle::kPosixFd && e.size() == sizeof(int)) {
    int fd = -1;
    std::memcpy(&fd, e.data(), sizeof fd);
    (void)::close(fd);
  }
  e.clear();
}

uintptr_t VmmPages::share(int device, uintptr_t address, size_t bytes, std::string* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranges_.upper_bound(address);
  if (it == ranges_.begin() || std::prev(it)->second.device != device ||
      address - std::prev(it)->first >= std::prev(it)->second.bytes)
    fail("share of " + hex(address) + ", not in an address range reserved on device " +
         std::to_string(device));
  --it;
  const uintptr_t base = it->first;
  Range& r = it->second;
  if (r.page_bytes == 0) fail("share of " + hex(address) + ", in a range with no page mapped");
  const size_t first = (address - base) / r.page_bytes;
  const size_t last = (address + bytes - base + r.page_bytes - 1) / r.page_bytes;
  for (size_t i = first; i < last; ++i) {
    if (i >= r.mapped.size() || !r.mapped[i])
      fail("share of " + hex(base + i * r.page_bytes) + ", a page that is not mapped");
    // Native's format lists one handle per page of one size.
    if (r.span[i] != 1)
      fail("share of " + hex(base + i * r.page_bytes) +
           ", a page of a cell mapped as one handle (the rescue policy's): native's "
           "format has one handle per page, so these pages cannot be shared");
  }
  if (r.type == ShareableHandle::kNone)
    fail("these pages were made without shareable handles "
         "(TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=0), so they cannot be shared");
  for (size_t i = first; i < last; ++i)
    if (r.exported[i].empty()) driver_.export_handle(device, r.handles[i], r.type, &r.exported[i]);
  // native's ShareHeader {pid_t pid; size_t segment_size; size_t
  // num_handles;}, its padding zeroed (the bytes are a cache key).
  char header[24] = {};
  const int32_t pid = static_cast<int32_t>(::getpid());
  const uint64_t page = r.page_bytes, count = last - first;
  std::memcpy(header, &pid, sizeof pid);
  std::memcpy(header + 8, &page, sizeof page);
  std::memcpy(header + 16, &count, sizeof count);
  out->append(header, sizeof header);
  for (size_t i = first; i < last; ++i) out->append(r.exported[i]);
  return base + first * r.page_bytes;
}

ShareableHandle VmmPages::import_type() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return choice_ == HandleChoice::kFabric ? ShareableHandle::kFabric : ShareableHandle::kPosixFd;
}

void VmmPages::add_peer(int device, int peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& peers = peers_of(device);
  if (peer == device || std::find(peers.begin(), peers.end(), peer) != peers.end()) return;
  // Access first, then the list: a failure leaves the peer unknown (a later
  // call tries again) with some runs already accessible, which is harmless.
  for (const auto& [base, r] : ranges_) {
    if (r.device != device) continue;
    for (size_t i = 0; i < r.mapped.size();) {
      if (!r.mapped[i]) {
        ++i;
        continue;
      }
      size_t end = i;
      while (end < r.mapped.size() && r.mapped[end]) ++end;
      driver_.set_access(device, base + i * r.page_bytes, (end - i) * r.page_bytes, peer);
      i = end;
    }
  }
  peers.push_back(peer);
}

std::vector<int> VmmPages::peers(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = peers_.find(device);
  return it == peers_.end() ? std::vector<int>{} : it->second;
}

size_t VmmPages::mapped_pages(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [base, r] : ranges_)
    if (r.device == device) n += static_cast<size_t>(std::count(r.mapped.begin(), r.mapped.end(), true));
  return n;
}

size_t VmmPages::live_handles(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [base, r] : ranges_)
    if (r.device == device)
      n += static_cast<size_t>(std::count_if(r.span.begin(), r.span.end(),
                                             [](uint32_t s) { return s != 0; }));
  return n;
}

size_t VmmPages::reserved_ranges() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ranges_.size();
}

ShareableHandle VmmPages::handle_type() const {
  std::lock_guard<std::mutex> lock(mutex_);
  switch (choice_) {
    case HandleChoice::kUntried:
    case HandleChoice::kFabric: return ShareableHandle::kFabric;
    case HandleChoice::kPosixFd: return ShareableHandle::kPosixFd;
    case HandleChoice::kNone: return ShareableHandle::kNone;
  }
  return ShareableHandle::kNone;
}

}  // namespace cachealloc
