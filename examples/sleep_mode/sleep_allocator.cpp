// A sleep-mode allocator, built the way inference engines build theirs: a
// CUDAPluggableAllocator whose segments are physical pages mapped at
// reserved virtual addresses (cuMemCreate / cuMemAddressReserve /
// cuMemMap), used through torch.cuda.MemPool(allocator=...). "Sleep"
// unmaps and releases a tag's physical pages (the device gets the memory
// back; the addresses stay reserved); "wake" creates and maps new pages at
// the same addresses, so every tensor and every allocator's bookkeeping
// stays valid. The caller keeps a CPU copy of what must survive
// (sleep_mode.py does that).
//
// C functions (ctypes), all on the calling thread's device context:
//   sleep_alloc / sleep_free   CUDAPluggableAllocator's alloc and free
//   sleep_set_tag(tag)         tag of the allocations made from now on
//   sleep_set_capacity(bytes)  refuse allocations past this many live bytes
//                              (0: no limit) -- a budget, and a way to test
//                              what a caching allocator does when refused
//   sleep_unmap(tag), sleep_remap(tag)   0, or -1 with sleep_last_error()
//   sleep_bytes(tag, mapped_only)        bytes of the tag's allocations
//
// Build: cmake -S examples/sleep_mode -B build-sleep && cmake --build build-sleep
// or:    g++ -O2 -shared -fPIC -I$CUDA_HOME/include sleep_allocator.cpp \
//          -o libsleep_allocator.so -ldl
#include <cuda.h>
#include <dlfcn.h>
#include <sys/types.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace {

// The driver functions used, looked up in libcuda.so.1 at first use (as
// PyTorch does), so the library builds without the driver installed.
struct Driver {
#define SLEEP_DRIVER_FUNCTIONS(_)                                                         \
  _(cuGetErrorName) _(cuCtxGetCurrent) _(cuCtxSetCurrent) _(cuDeviceGet)                 \
  _(cuDevicePrimaryCtxRetain) _(cuMemGetAllocationGranularity) _(cuMemAddressReserve)    \
  _(cuMemAddressFree) _(cuMemCreate) _(cuMemRelease) _(cuMemMap) _(cuMemUnmap)           \
  _(cuMemSetAccess)
#define SLEEP_DECLARE(name) decltype(&::name) name = nullptr;
  SLEEP_DRIVER_FUNCTIONS(SLEEP_DECLARE)
  bool loaded = false;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver out;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return out;
#define SLEEP_LOOK_UP(name) out.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));
    SLEEP_DRIVER_FUNCTIONS(SLEEP_LOOK_UP)
    out.loaded = out.cuMemSetAccess != nullptr && out.cuMemCreate != nullptr;
    return out;
  }();
  return d;
}

struct Allocation {
  size_t bytes = 0;  // rounded to the granularity; the reserved range's size
  int device = 0;
  int tag = 0;
  CUmemGenericAllocationHandle pages = 0;
  bool mapped = false;
};

std::mutex g_mutex;
std::map<CUdeviceptr, Allocation> g_allocations;  // by address
int g_tag = 0;
size_t g_capacity = 0;  // 0: unlimited
size_t g_live_bytes = 0;
thread_local std::string g_error;

bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  driver().cuGetErrorName(r, &name);
  g_error = std::string(what) + ": " + (name ? name : "unknown CUDA error");
  return false;
}

CUmemAllocationProp properties(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// The device's primary context, current on this thread (PyTorch's is,
// unless the thread never touched CUDA).
bool ensure_context(int device) {
  if (!driver().loaded) {
    g_error = "libcuda.so.1 (the CUDA driver) could not be loaded";
    return false;
  }
  CUcontext ctx = nullptr;
  if (!ok(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent")) return false;
  if (ctx) return true;
  CUdevice dev;
  return ok(driver().cuDeviceGet(&dev, device), "cuDeviceGet") &&
         ok(driver().cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") &&
         ok(driver().cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

// New physical pages for `a`, mapped at `address` and readable and
// writable from its device. On failure nothing is left created or mapped.
bool map_pages(CUdeviceptr address, Allocation& a) {
  const CUmemAllocationProp prop = properties(a.device);
  CUmemGenericAllocationHandle pages = 0;
  if (!ok(driver().cuMemCreate(&pages, a.bytes, &prop, 0), "cuMemCreate")) return false;
  if (!ok(driver().cuMemMap(address, a.bytes, 0, pages, 0), "cuMemMap")) {
    driver().cuMemRelease(pages);
    return false;
  }
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (!ok(driver().cuMemSetAccess(address, a.bytes, &access, 1), "cuMemSetAccess")) {
    driver().cuMemUnmap(address, a.bytes);
    driver().cuMemRelease(pages);
    return false;
  }
  a.pages = pages;
  a.mapped = true;
  return true;
}

bool unmap_pages(CUdeviceptr address, Allocation& a) {
  if (!ok(driver().cuMemUnmap(address, a.bytes), "cuMemUnmap") ||
      !ok(driver().cuMemRelease(a.pages), "cuMemRelease"))
    return false;
  a.pages = 0;
  a.mapped = false;
  return true;
}

}  // namespace

extern "C" {

// CUDAPluggableAllocator's alloc: NULL when the device (or the capacity)
// refuses, which PyTorch's allocators treat as out of memory.
void* sleep_alloc(ssize_t size, int device, void* /*stream*/) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (size <= 0 || !ensure_context(device)) return nullptr;
  const CUmemAllocationProp prop = properties(device);
  size_t granularity = 0;
  if (!ok(driver().cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity"))
    return nullptr;
  Allocation a;
  a.bytes = (static_cast<size_t>(size) + granularity - 1) / granularity * granularity;
  a.device = device;
  a.tag = g_tag;
  if (g_capacity && g_live_bytes + a.bytes > g_capacity) {
    g_error = "sleep_alloc: over the capacity set with sleep_set_capacity";
    return nullptr;
  }
  CUdeviceptr address = 0;
  if (!ok(driver().cuMemAddressReserve(&address, a.bytes, granularity, 0, 0), "cuMemAddressReserve"))
    return nullptr;
  if (!map_pages(address, a)) {
    driver().cuMemAddressFree(address, a.bytes);
    return nullptr;
  }
  g_allocations[address] = a;
  g_live_bytes += a.bytes;
  return reinterpret_cast<void*>(address);
}

// CUDAPluggableAllocator's free. A sleeping allocation has no pages left.
void sleep_free(void* ptr, ssize_t /*size*/, int /*device*/, void* /*stream*/) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.find(reinterpret_cast<CUdeviceptr>(ptr));
  if (it == g_allocations.end()) {
    std::fprintf(stderr, "sleep_free: %p was not allocated here\n", ptr);
    return;
  }
  Allocation& a = it->second;
  if (a.mapped && !unmap_pages(it->first, a))
    std::fprintf(stderr, "sleep_free: %s\n", g_error.c_str());
  if (!ok(driver().cuMemAddressFree(it->first, a.bytes), "cuMemAddressFree"))
    std::fprintf(stderr, "sleep_free: %s\n", g_error.c_str());
  g_live_bytes -= a.bytes;
  g_allocations.erase(it);
}

void sleep_set_tag(int tag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_tag = tag;
}

void sleep_set_capacity(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_capacity = bytes;
}

// Releases the physical pages of every mapped allocation of `tag`. The
// caller has synchronized the device (no kernel may touch them now).
int sleep_unmap(int tag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [address, a] : g_allocations)
    if (a.tag == tag && a.mapped && !unmap_pages(address, a)) return -1;
  return 0;
}

// Maps new pages at the addresses of every sleeping allocation of `tag`.
// Their contents are undefined until the caller writes them.
int sleep_remap(int tag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [address, a] : g_allocations)
    if (a.tag == tag && !a.mapped && !(ensure_context(a.device) && map_pages(address, a)))
      return -1;
  return 0;
}

size_t sleep_bytes(int tag, int mapped_only) {
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t total = 0;
  for (const auto& [address, a] : g_allocations)
    if (a.tag == tag && (a.mapped || !mapped_only)) total += a.bytes;
  return total;
}

const char* sleep_last_error() { return g_error.c_str(); }

}  // extern "C"
