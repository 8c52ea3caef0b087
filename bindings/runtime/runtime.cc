#include "bindings/runtime/runtime.h"
#include "bindings/runtime/visitor_action.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "allocator/base/errors.h"
#include "allocator/policy/policy_registry.h"
#include "allocator/sim/simulated_device.h"
#include "bindings/runtime/python_frames.h"
#include "bindings/runtime/snapshot_visitor.h"
#include "stats/snapshot.h"
#ifdef CACHEALLOC_WITH_CUDA
#include "bindings/cuda/cuda_backends.h"
#include "bindings/cuda/cuda_runtime_loader.h"
#endif

namespace cachealloc {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
}

size_t parse_count(const std::string& text, const std::string& what) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw ConfigError("backend: " + what + " must be a number, got '" + text + "'");
  errno = 0;
  const unsigned long long n = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) throw ConfigError("backend: " + what + " '" + text + "' is too large");
  return static_cast<size_t>(n);
}

}  // namespace

Generation::Generation(AllocatorConfig config_in, std::string backend_name_in,
                       std::vector<std::unique_ptr<DeviceBackend>> backends_in,
                       std::string policy_in)
    : config(std::move(config_in)),
      backend_name(std::move(backend_name_in)),
      policy(std::move(policy_in)),
      backends(std::move(backends_in)),
      allocator(config, [&] {
        std::vector<DeviceBackend*> per_device;
        for (auto& b : backends) per_device.push_back(b ? b.get() : per_device.front());
        return per_device;
      }(), policy) {
  for (int d = 0; d < allocator.device_count(); ++d) {
    stats.push_back(std::make_unique<StatsCollector>(config.max_split_size_stat()));
    history.push_back(std::make_unique<HistoryRecorder>());
    requests.push_back(nullptr);  // the request ring: off (record_requests)
    scopes.push_back(std::make_unique<ScopeTracker>());  // fresh engine: 0 allocated, 0 reserved
    reporters.push_back(std::make_unique<BlockReporter>(*stats.back()));
    // History and scope trackers are attached only while recording or while
    // a scope is open (record_history, scope_open): idle, they cost nothing.
    allocator.with_device(d, [&](DeviceCachingAllocator& e) { e.add_observer(stats.back().get()); });
  }
}

void Runtime::init(const std::string& conf, const std::string& backend, const std::string& policy) {
  std::lock_guard<std::mutex> lock(init_mutex_);
  init_locked(conf, backend, policy);
}

std::string Runtime::policy_to_run(const std::string& asked) {
  std::string name = asked;
  bool from_environment = false;
  if (name.empty()) {
    const char* env = std::getenv("CACHEALLOC_POLICY");
    name = env && *env ? env : "native";
    from_environment = env && *env;
  }
  try {
    check_policy_name(name);
  } catch (const ConfigError& e) {
    throw ConfigError(from_environment ? std::string("CACHEALLOC_POLICY: ") + e.what() : e.what());
  }
  return name;
}

void Runtime::init_locked(const std::string& conf, const std::string& backend,
                          const std::string& policy_asked) {
  const std::string policy = policy_to_run(policy_asked);
  AllocatorConfig config = AllocatorConfig::parse(conf);
  std::string kind = backend.empty()
                         ? (config.backend == BackendKind::kCudaMallocAsync ? "async" : "cuda")
                         : backend;
  // Native's cudaMallocAsync allocator accepts expandable_segments and never
  // reads it; so here: segments stay cudaMallocAsync allocations (that
  // backend has no pages to map). The config text still shows the key.
  if (kind == "async") config.expandable_segments = false;
  std::vector<std::unique_ptr<DeviceBackend>> backends;
  if (kind.rfind("simulated", 0) == 0) {
    auto parts = split(kind, ':');
    if (parts[0] != "simulated" || parts.size() > 3)
      throw ConfigError("backend '" + kind + "': expected simulated[:BYTES[:DEVICES]]");
    size_t bytes = parts.size() > 1 ? parse_count(parts[1], "simulated bytes") : (size_t{80} << 30);
    size_t devices = parts.size() > 2 ? parse_count(parts[2], "simulated devices") : 1;
    if (devices == 0 || devices > 64) throw ConfigError("backend: 1 to 64 simulated devices");
    // Each device's addresses start a whole number of TiB (at least one)
    // past the previous device's, so that no address is handed out by two
    // devices; all must end below 2^63 (snapshots hold signed 64-bit ints).
    constexpr uintptr_t kTiB = uintptr_t{1} << 40;
    const uintptr_t stride_tib = std::max<uintptr_t>(1, bytes / kTiB + (bytes % kTiB != 0));
    if (stride_tib * devices > ((uintptr_t{1} << 63) - SimulatedDevice::kDefaultBase) / kTiB)
      throw ConfigError("backend '" + kind + "': simulated bytes " + std::to_string(bytes) +
                        " on " + std::to_string(devices) +
                        " devices do not fit below address 2^63");
    for (size_t i = 0; i < devices; ++i)
      backends.push_back(std::make_unique<SimulatedDevice>(
          bytes, SimulatedDevice::kDefaultBase + i * stride_tib * kTiB));
  } else if (kind == "cuda" || kind == "async") {
#ifdef CACHEALLOC_WITH_CUDA
    cuda_runtime_library();  // throws naming where it looked and the fix
    const int n = cuda_device_count();
    if (n == 0) throw BackendError("backend '" + kind + "': no CUDA device is available");
    // One backend object serves every device (calls carry the device).
    std::unique_ptr<DeviceBackend> shared =
        kind == "cuda" ? make_cuda_runtime_backend() : make_cuda_async_backend();
    backends.push_back(std::move(shared));
    for (int i = 1; i < n; ++i) backends.push_back(nullptr);  // served by the first
#else
    throw BackendError("backend '" + kind + "': this build of cachealloc has no CUDA support (the CUDA "
                       "headers were not found when it was built). Fix: reinstall it with torch's "
                       "CUDA build present (pip install --no-build-isolation --force-reinstall "
                       "cachealloc), or with CUDA_HOME set to a CUDA toolkit; `cachealloc doctor` "
                       "checks the machine");
#endif
  } else {
    throw ConfigError("unknown backend '" + kind + "': expected cuda, async or simulated[:BYTES[:DEVICES]]");
  }

  // Everything that can fail comes before the old generation is retired:
  // once it is, the new one must be published (calls retry until then).
  auto fresh = std::make_unique<Generation>(std::move(config), kind, std::move(backends), policy);
  // The flight recorder's ring, when on, records the new generation from
  // its first request (allocated here: it may fail, before anything else).
  set_request_rings(*fresh, request_records_.load(std::memory_order_relaxed));
  generations_.reserve(generations_.size() + 1);
  Generation* old = current_.load(std::memory_order_relaxed);
  if (old && !old->allocator.retire_if_idle())
    throw ConfigError("cachealloc is already in use (blocks are allocated); it cannot be re-initialized");
  // A new generation records no history and captures no context.
  capture_.reset();
  generations_.push_back(std::move(fresh));
  current_.store(generations_.back().get(), std::memory_order_release);
  attach_segment_trackers(*generations_.back());
  if (old) {
    // The retired generation's history rings and cached segments go.
    set_recording(*old, false, false, 0);
    set_request_rings(*old, 0);
    old->allocator.empty_cache();  // a backend error here leaves the new generation in place
  }
}

void Runtime::init_from_environment() {
  std::lock_guard<std::mutex> lock(init_mutex_);
  if (current_.load(std::memory_order_relaxed)) return;  // another thread's first call got here first
  const std::string conf = AllocatorConfig::text_from_environment();
  AllocatorConfig::parse_environment_text(conf);  // a bad value is refused naming its variable
  init_locked(conf, "", "");
}

void Runtime::enable_peer_access(int dev, int dev_to_access) {
  Generation& g = current();
  const int n = g.allocator.device_count();
  if (dev < 0 || dev >= n || dev_to_access < 0 || dev_to_access >= n)
    throw BackendError("enable_peer_access(" + std::to_string(dev) + ", " +
                       std::to_string(dev_to_access) + "): devices are 0 to " +
                       std::to_string(n - 1));
#ifdef CACHEALLOC_WITH_CUDA
  if (g.backend_name == "cuda" || g.backend_name == "async") {
    cuda_enable_peer_access(*g.backends.front(), dev, dev_to_access);
    return;
  }
#endif
  throw BackendError("enable_peer_access: backend '" + g.backend_name + "' has no peer access");
}

bool Runtime::share_expandable(uintptr_t address, std::string* out, size_t* offset) {
  return current().allocator.share_expandable(address, out, offset);
}

uintptr_t Runtime::open_shared_expandable(int device, std::string_view bytes) {
#ifdef CACHEALLOC_WITH_CUDA
  // The backend refuses unless it is the cudaMalloc one (cuda_backends.h).
  return cuda_open_shared_expandable(*current().backends.front(), device, bytes);
#else
  (void)device, (void)bytes;
  throw BackendError("cachealloc: built without CUDA: nothing to open");
#endif
}

void Runtime::close_shared_expandable(uintptr_t base) {
#ifdef CACHEALLOC_WITH_CUDA
  // Opened by this generation's backend or by a retired one (retired
  // generations live on; a re-initialization does not wait for the other
  // process's tensors to be let go).
  std::lock_guard<std::mutex> lock(init_mutex_);
  for (auto it = generations_.rbegin(); it != generations_.rend(); ++it)
    if (!(*it)->backends.empty() && (*it)->backends.front() &&
        cuda_close_shared_expandable(*(*it)->backends.front(), base))
      return;
  throw BackendError("cachealloc: closing a shared expandable segment at " + std::to_string(base) +
                     ", which is not one opened here");
#else
  (void)base;
  throw BackendError("cachealloc: built without CUDA: nothing to close");
#endif
}

const std::string& Runtime::policy_name() const {
  static const std::string none;
  const Generation* g = current_.load(std::memory_order_acquire);
  return g ? g->policy : none;
}

const std::string& Runtime::backend_name() const {
  static const std::string none;
  const Generation* g = current_.load(std::memory_order_acquire);
  return g ? g->backend_name : none;
}

uintptr_t Runtime::allocate_capturing(size_t size, int device, uintptr_t stream) {
  return allocate_with(size, device, stream, capture_.capture_for_alloc());
}

void Runtime::deallocate_capturing(uintptr_t address, int device) {
  deallocate_with(address, device, capture_.capture_for_free());
}

DeviceStats Runtime::stats(int device) {
  Generation& g = current();
  return g.allocator.with_device(device, [&](DeviceCachingAllocator&) {
    return g.stats[static_cast<size_t>(device)]->stats();
  });
}

void Runtime::usage(int device, int64_t* allocated, int64_t* reserved) {
  Generation& g = current();
  g.allocator.with_device(device, [&](DeviceCachingAllocator&) {
    const DeviceStats& s = g.stats[static_cast<size_t>(device)]->stats();
    *allocated = s.allocated_bytes[kAllPools].current;
    *reserved = s.reserved_bytes[kAllPools].current;
  });
}

double Runtime::memory_fraction(int device) {
  Generation& g = current();
  return g.allocator.with_device(device, [&](DeviceCachingAllocator& e) {
    if (!e.memory_limit().is_set()) return 1.0;
    const size_t total = g.backends.front()->memory_info(device).total_bytes;
    return total ? static_cast<double>(e.memory_limit().allowed_bytes()) / total : 1.0;
  });
}

namespace {
void* opaque_of(const ContextPtr* ctx) {
  return ctx && *ctx ? (*ctx)->opaque.get() : nullptr;
}
}  // namespace

void Runtime::visit_snapshot(const cachealloc_snapshot_visitor& v, void* user) {
  Generation& g = current();
  for (int d = 0; d < g.allocator.device_count(); ++d) {
    g.allocator.with_device(d, [&](DeviceCachingAllocator& e) {
      size_t active = 0;
      for (const SegmentView& s : e.segments()) {
        size_t total = 0;
        for (const Block* b : s.blocks) {
          total += b->size;
          if (!b->is_free()) active += b->size;
        }
        v.segment(user, d, s.address, total, reinterpret_cast<void*>(s.stream), s.is_small,
                  opaque_of(s.context), s.pool_id.first, s.pool_id.second, s.is_expandable);
        for (const Block* b : s.blocks)
          v.block(user, b->size, b->requested_size, b->allocated, !b->is_free(),
                  opaque_of(&b->context_when_allocated));
      }
      for (const TraceEntry& t : g.history[static_cast<size_t>(d)]->entries()) {
        const int code = visitor_action_code(t.action);
        if (code < 0) continue;
        v.trace(user, d, code, t.address, t.size, reinterpret_cast<void*>(t.stream), t.time_us,
                opaque_of(&t.context));
      }
      g.history[static_cast<size_t>(d)]->record_snapshot(d, active);
    });
  }
}

void Runtime::reset_peak(int device) {
  Generation& g = current();
  g.allocator.with_device(device, [&](DeviceCachingAllocator&) {
    g.stats[static_cast<size_t>(device)]->reset_peak();
  });
}

void Runtime::reset_accumulated(int device) {
  Generation& g = current();
  g.allocator.with_device(device, [&](DeviceCachingAllocator&) {
    g.stats[static_cast<size_t>(device)]->reset_accumulated();
  });
}

uint64_t Runtime::scope_open(int device) {
  Generation& g = current();
  return g.allocator.with_device(device, [&](DeviceCachingAllocator& e) {
    ScopeTracker& t = *g.scopes[static_cast<size_t>(device)];
    if (t.depth() == 0) {
      // Detached while idle: catch up with the engine, then watch it.
      t.resync(static_cast<int64_t>(e.allocated_bytes()),
               static_cast<int64_t>(e.reserved_bytes()));
      e.add_observer(&t);
    }
    try {
      return t.open();
    } catch (...) {
      if (t.depth() == 0) e.remove_observer(&t);
      throw;
    }
  });
}

ScopeResult Runtime::scope_close(int device, uint64_t id) {
  Generation& g = current();
  return g.allocator.with_device(device, [&](DeviceCachingAllocator& e) {
    ScopeTracker& t = *g.scopes[static_cast<size_t>(device)];
    try {
      ScopeResult r = t.close(id);
      if (t.depth() == 0) e.remove_observer(&t);
      return r;
    } catch (const ScopeError& err) {
      throw ScopeError("device " + std::to_string(device) + ": " + err.what());
    }
  });
}

size_t Runtime::scope_depth(int device) {
  Generation& g = current();
  return g.allocator.with_device(device, [&](DeviceCachingAllocator&) {
    return g.scopes[static_cast<size_t>(device)]->depth();
  });
}

void Runtime::record_history(bool enabled, ContextLevel level, bool python_stacks,
                             size_t max_entries) {
  ContextCapture::Settings s;
  s.history_enabled = enabled;
  s.level = level;
  s.python_stacks = python_stacks && level != ContextLevel::kNever;
  put_history_in_force(s, max_entries);
}

void Runtime::record_history_from(bool enabled, ContextLevel when, size_t max_entries,
                                  const ContextSource& source) {
  // PyTorch's recordHistory: disabled, nothing is captured any more (the
  // allocator would otherwise keep taking the capturing path for every
  // call); its max_entries 0 keeps one entry.
  ContextCapture::Settings s;
  s.history_enabled = enabled;
  s.level = enabled ? when : ContextLevel::kNever;
  if (enabled) s.source = source;
  put_history_in_force(s, enabled && max_entries == 0 ? 1 : max_entries);
}

void Runtime::put_history_in_force(const ContextCapture::Settings& s, size_t max_entries) {
  // Under the init lock: the settings and the generation's recorders change
  // together, never half before and half after a re-initialization. The
  // ring first (it can fail: it could not grow), so a failed call leaves
  // the old settings in force.
  std::lock_guard<std::mutex> lock(init_mutex_);
  Generation& g = current();
  set_recording(g, s.history_enabled, ContextCapture::ring_keeps_context(s), max_entries);
  capture_.set(s);
}

void Runtime::set_history_skipped(ActionMask skipped) {
  std::lock_guard<std::mutex> lock(init_mutex_);
  for_each_recorder(current(), [&](DeviceCachingAllocator&, HistoryRecorder& h) {
    h.set_skipped(skipped);
  });
}

void Runtime::set_segment_callback(SegmentCallback fn, void* user) {
  std::lock_guard<std::mutex> lock(init_mutex_);
  segment_fn_ = fn;
  segment_user_ = user;
  if (Generation* g = current_.load(std::memory_order_acquire)) attach_segment_trackers(*g);
}

void Runtime::attach_segment_trackers(Generation& g) {
  for (size_t d = 0; d < g.segment_trackers.size(); ++d)
    g.allocator.with_device(static_cast<int>(d), [&](DeviceCachingAllocator& e) {
      e.remove_observer(g.segment_trackers[d].get());
    });
  g.segment_trackers.clear();
  if (!segment_fn_) return;
  for (int d = 0; d < g.allocator.device_count(); ++d) {
    g.segment_trackers.push_back(std::make_unique<SegmentTracker>(d, segment_fn_, segment_user_));
    g.allocator.with_device(d, [&](DeviceCachingAllocator& e) {
      e.add_observer(g.segment_trackers.back().get());
    });
  }
}

void Runtime::set_recording(Generation& g, bool enabled, bool keep_context,
                            size_t max_entries) {
  for_each_recorder(g, [&](DeviceCachingAllocator& e, HistoryRecorder& h) {
    const bool was_enabled = h.enabled();
    // Attached only while recording (a disabled recorder ignores events).
    // Attached before enabling, so that a std::bad_alloc in either step
    // leaves it off and detached, as it was.
    if (!enabled) {
      h.disable();
      if (was_enabled) e.remove_observer(&h);
      return;
    }
    if (!was_enabled) e.add_observer(&h);
    try {
      h.enable(max_entries, keep_context);
    } catch (...) {
      if (!was_enabled) e.remove_observer(&h);
      throw;
    }
  });
}

PyValue Runtime::snapshot() {
  Generation& g = current();
  std::vector<std::pair<uintptr_t, PyValue>> segments;
  PyValue traces = PyValue::list();
  for (int d = 0; d < g.allocator.device_count(); ++d) {
    g.allocator.with_device(d, [&](DeviceCachingAllocator& e) {
      size_t active = 0;
      for (const SegmentView& s : e.segments()) {
        segments.emplace_back(s.address, segment_to_py(s));
        for (const Block* b : s.blocks)
          if (!b->is_free()) active += b->size;
      }
      PyValue list = PyValue::list();
      for (const TraceEntry& t : g.history[static_cast<size_t>(d)]->entries())
        list.append(trace_entry_to_py(t));
      traces.append(std::move(list));
      // As native: taking a snapshot is itself recorded (seen by the next one).
      g.history[static_cast<size_t>(d)]->record_snapshot(d, active);
    });
  }
  std::stable_sort(segments.begin(), segments.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  PyValue segs = PyValue::list();
  for (auto& [addr, v] : segments) segs.append(std::move(v));
  return snapshot_root(std::move(segs), std::move(traces), g.allocator.config());
}

}  // namespace cachealloc
