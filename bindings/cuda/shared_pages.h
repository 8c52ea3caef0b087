// Opening pages that another process shared (native 2.11's
// ExpandableSegment::fromShared): the bytes VmmPages::share writes, as
// native writes them, after CUDA IPC's version and type bytes:
//   header {int32 pid, 4 zero bytes, uint64 page bytes, uint64 page count}
//   then per page a POSIX descriptor number of that process (4 bytes) or a
//   fabric handle (64 bytes), by this process's handle type.
// The pages are imported (a descriptor is copied out of the sending process
// with pidfd_getfd, which needs Linux 5.6 and the right to trace it, as
// native), mapped into a fresh address range, and made accessible from the
// device and its peers. Closing waits for the device, then unmaps and
// releases them and frees the range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "bindings/cuda/vmm_driver.h"

namespace cachealloc {

struct ImportedPages {
  int device = 0;
  uintptr_t base = 0;  // the first page's address here
  size_t page_bytes = 0;
  std::vector<uint64_t> handles;  // one per page, mapped in order from base
  size_t bytes() const { return page_bytes * handles.size(); }
};

// Throws BackendError naming the problem (malformed bytes, a process that
// is gone or may not be traced, a driver failure); nothing is left imported,
// mapped or reserved then.
ImportedPages import_shared_pages(VmmDriver& driver, int device, std::string_view bytes,
                                  ShareableHandle type, const std::vector<int>& peers);
// Never throws: failures are reported on stderr (it runs when the last
// tensor over the pages is released).
void close_imported_pages(VmmDriver& driver, const ImportedPages& pages) noexcept;

}  // namespace cachealloc
