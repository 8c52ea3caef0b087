// The C API over Runtime: argument checks, exception-to-status translation.
#include "bindings/c_api/cachealloc.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/base/hot_inline.h"
#include "allocator/config/config_keys.h"
#include "allocator/policy/policy_registry.h"
#include "bindings/c_api/c_api_internal.h"
#include "bindings/runtime/runtime.h"
#include "pickle/pickle_writer.h"
#include "stats/history.h"
#ifdef CACHEALLOC_WITH_CUDA
#include "bindings/cuda/cuda_runtime_loader.h"
#endif

using cachealloc::Runtime;

namespace {

using cachealloc::c_api::copy_out;
using cachealloc::c_api::guarded;
using cachealloc::c_api::initialized_runtime;
using cachealloc::c_api::last_error;
using cachealloc::c_api::set_last_error;
// The calling thread's last OutOfMemoryError (cachealloc_last_oom); empty
// until it has one.
thread_local std::optional<cachealloc::OutOfMemoryError::Details> last_oom;

// Runs a free. PyTorch's free entry point returns void, so a failure (an
// unknown pointer) cannot reach the caller: it goes to last_error and stderr.
template <typename Fn>
void report_free_errors(Fn&& fn,
                        const std::source_location where = std::source_location::current()) {
  try {
    fn();
  } catch (const std::bad_alloc&) {
    cachealloc::c_api::set_out_of_memory_error(where);
    std::fprintf(stderr, "%s\n", last_error.c_str());
  } catch (const std::exception& e) {
    set_last_error(e.what());
    std::fprintf(stderr, "%s\n", e.what());
  }
}

// Takes ownership of a framework context object (see cachealloc.h).
cachealloc::ContextPtr wrap_context(void* context, void (*release)(void*)) {
  return cachealloc::wrap_foreign_context(context, release);
}

void copy_report(const cachealloc::BlockReport& from, cachealloc_block_report* to) {
  to->size = from.size;
  to->device = from.device;
  to->allocated = from.allocated;
  to->reserved = from.reserved;
}

// A C caller's size in bytes; throws SizeOverflowError when negative.
size_t checked_size(ssize_t size) {
  if (size < 0) throw cachealloc::SizeOverflowError("negative allocation size " + std::to_string(size));
  return static_cast<size_t>(size);
}

// The try_malloc entry points' status: 0 with *out set by `allocate`
// (() -> address), 1 when the device is out of memory (last error and last
// OOM set), -1 on any other error (last error set; `null_out` when out is
// NULL); *out is null unless 0. No exception leaves it.
template <typename Allocate>
int malloc_status(std::string_view null_out, void** out, Allocate&& allocate) {
  if (!out) {
    set_last_error(null_out);
    return -1;
  }
  *out = nullptr;
  try {
    *out = reinterpret_cast<void*>(allocate());
    return 0;
  } catch (const cachealloc::OutOfMemoryError& e) {
    set_last_error(e.what());
    last_oom = e.details();
    return 1;
  } catch (const std::bad_alloc&) {
    cachealloc::c_api::set_out_of_memory_error(std::source_location::current());
    return -1;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return -1;
  }
}

const std::vector<std::string>& stat_names() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>();
    for (const auto& [k, value] : cachealloc::DeviceStats{}.key_values()) v->push_back(k);
    return v;
  }();
  return *names;
}

}  // namespace

extern "C" {

void* cachealloc_malloc(ssize_t size, int device, void* stream) {
  if (size < 0)
    throw cachealloc::SizeOverflowError("cachealloc: negative allocation size " +
                                        std::to_string(size));
  Runtime& r = initialized_runtime();
  try {
    return reinterpret_cast<void*>(
        r.allocate(static_cast<size_t>(size), device, reinterpret_cast<uintptr_t>(stream)));
  } catch (const cachealloc::OutOfMemoryError& e) {
    last_oom = e.details();
    if (auto handler = r.oom_handler()) handler(e.what());
    throw;
  }
}

int cachealloc_try_malloc(ssize_t size, int device, void* stream, void** out) {
  return cachealloc_try_malloc_ctx(size, device, stream, nullptr, nullptr, out);
}

int cachealloc_try_malloc_ctx(ssize_t size, int device, void* stream, void* context,
                              void (*release)(void*), void** out) {
  return malloc_status("cachealloc_try_malloc: out is NULL", out, [&] {
    // Inside malloc_status's try: wrapping the context allocates
    // (std::bad_alloc must become this call's status, not escape a C
    // function), and comes first: the context is owned from the call on and
    // is released even when the size is refused.
    const cachealloc::ContextPtr ctx = wrap_context(context, release);
    const size_t bytes = checked_size(size);
    Runtime& r = initialized_runtime();
    const uintptr_t s = reinterpret_cast<uintptr_t>(stream);
    return context ? r.allocate_with(bytes, device, s, ctx) : r.allocate(bytes, device, s);
  });
}

int cachealloc_try_malloc_report(ssize_t size, int device, void* stream, void** out,
                                 cachealloc_block_report* report) {
  if (!report) return cachealloc_try_malloc(size, device, stream, out);
  *report = cachealloc_block_report{0, -1, 0, 0};
  return malloc_status("cachealloc_try_malloc_report: out is NULL", out, [&] {
    const size_t bytes = checked_size(size);
    cachealloc::BlockReport r;
    const uintptr_t address = initialized_runtime().allocate_reported(
        bytes, device, reinterpret_cast<uintptr_t>(stream), r);
    copy_report(r, report);
    return address;
  });
}

int cachealloc_free_report(void* ptr, int device, cachealloc_block_report* report) {
  if (!report) {
    bool failed = false;
    report_free_errors([&] {
      failed = true;
      initialized_runtime().deallocate(reinterpret_cast<uintptr_t>(ptr), device);
      Runtime::note_unreported();  // frees only: half the cost, same signal
      failed = false;
    });
    return failed ? -1 : 0;
  }
  *report = cachealloc_block_report{0, -1, 0, 0};
  bool failed = true;
  report_free_errors([&] {
    cachealloc::BlockReport r;
    initialized_runtime().deallocate_reported(reinterpret_cast<uintptr_t>(ptr), device, r);
    copy_report(r, report);
    failed = false;
  });
  return failed ? -1 : 0;
}

void cachealloc_free(void* ptr, ssize_t, int device, void*) {
  // The hot path PyTorch calls: no context to wrap.
  report_free_errors(
      [&] { initialized_runtime().deallocate(reinterpret_cast<uintptr_t>(ptr), device); });
}

void cachealloc_free_ctx(void* ptr, int device, void* context, void (*release)(void*)) {
  report_free_errors([&] {
    const cachealloc::ContextPtr ctx = wrap_context(context, release);
    Runtime& r = initialized_runtime();
    if (context) r.deallocate_with(reinterpret_cast<uintptr_t>(ptr), device, ctx);
    else r.deallocate(reinterpret_cast<uintptr_t>(ptr), device);
  });
}

int cachealloc_block_info(void* ptr, size_t* size, int* device) {
  return guarded([&] {
    if (!size || !device) throw std::invalid_argument("cachealloc_block_info: NULL output");
    const auto info = initialized_runtime().on_allocator([&](cachealloc::CachingAllocator& a) {
      return a.block_info(reinterpret_cast<uintptr_t>(ptr));
    });
    *size = info.size;
    *device = info.device;
  });
}

int cachealloc_block_size(void* ptr, size_t* size) {
  return guarded([&] {
    if (!size) throw std::invalid_argument("cachealloc_block_size: NULL output");
    *size = initialized_runtime().on_allocator([&](cachealloc::CachingAllocator& a) {
      return a.block_size(reinterpret_cast<uintptr_t>(ptr));
    });
  });
}

int cachealloc_usage(int device, int64_t* allocated, int64_t* reserved) {
  return guarded([&] {
    if (!allocated || !reserved) throw std::invalid_argument("cachealloc_usage: NULL output");
    initialized_runtime().usage(device, allocated, reserved);
  });
}

int cachealloc_memory_fraction(int device, double* fraction) {
  return guarded([&] {
    if (!fraction) throw std::invalid_argument("cachealloc_memory_fraction: NULL output");
    *fraction = initialized_runtime().memory_fraction(device);
  });
}

int cachealloc_visit_snapshot(const cachealloc_snapshot_visitor* v, void* user) {
  return guarded([&] {
    if (!v || !v->segment || !v->block || !v->trace)
      throw std::invalid_argument("cachealloc_visit_snapshot: incomplete visitor");
    initialized_runtime().visit_snapshot(*v, user);
  });
}

int cachealloc_expandable_segments(void) {
  int on = 0;
  const int status = guarded([&] { on = initialized_runtime().config().expandable_segments ? 1 : 0; });
  return status == 0 ? on : -1;
}

int cachealloc_config_info(uint64_t* max_split_size, double* gc_threshold,
                           uint64_t* roundup_divisions16, const char** conf_text) {
  return guarded([&] {
    // The text outlives the copy: it stays in this thread's buffer.
    static thread_local std::string text;
    const cachealloc::AllocatorConfig c = initialized_runtime().config();
    if (max_split_size) *max_split_size = c.max_split_size;
    if (gc_threshold) *gc_threshold = c.garbage_collection_threshold;
    if (roundup_divisions16)
      for (size_t i = 0; i < c.roundup_power2_divisions.size(); ++i)
        roundup_divisions16[i] = c.roundup_power2_divisions[i];
    if (conf_text) {
      text = c.source;
      *conf_text = text.c_str();
    }
  });
}

int cachealloc_set_allocator_settings(const char* settings) {
  return guarded([&] {
    if (!settings) throw std::invalid_argument("cachealloc_set_allocator_settings: NULL settings");
    initialized_runtime().apply_settings(settings);
  });
}

int cachealloc_check_allocator_settings(const char* settings) {
  bool unsupported = false;
  const int status = guarded([&] {
    if (!settings)
      throw std::invalid_argument("cachealloc_check_allocator_settings: NULL settings");
    try {
      (void)initialized_runtime().config().with_settings(settings);
    } catch (const cachealloc::UnsupportedConfig&) {
      unsupported = true;
      throw;
    }
  });
  return unsupported ? -2 : status;
}

int cachealloc_init(const char* conf, const char* backend) {
  return cachealloc_init_policy(conf, backend, nullptr);
}

int cachealloc_init_policy(const char* conf, const char* backend, const char* policy) {
  return guarded([&] {
    const std::string c = conf ? conf : cachealloc::AllocatorConfig::text_from_environment();
    // From the environment: a bad value is refused naming its variable.
    if (!conf) cachealloc::AllocatorConfig::parse_environment_text(c);
    Runtime::instance().init(c, backend ? backend : "", policy ? policy : "");
  });
}

int cachealloc_check_policy(const char* policy) {
  return guarded([&] { Runtime::policy_to_run(policy ? policy : ""); });
}

const char* cachealloc_policy_name(void) { return Runtime::instance().policy_name().c_str(); }

const char* cachealloc_policy_names(void) {
  static const std::string* const names = [] {
    auto* s = new std::string;
    for (const std::string& n : cachealloc::policy_names()) *s += (s->empty() ? "" : ",") + n;
    return s;
  }();
  return names->c_str();
}

int cachealloc_set_torch_version(const char* version) {
  return guarded([&] {
    if (!version) throw std::invalid_argument("cachealloc_set_torch_version: NULL version");
    const auto release = cachealloc::torch_release_of(version);
    if (!release)
      throw std::invalid_argument(std::string("cachealloc_set_torch_version: '") + version +
                                  "' is not a version like 2.12.0");
    cachealloc::set_process_torch_release(*release);
  });
}

int cachealloc_is_initialized(void) { return Runtime::instance().initialized() ? 1 : 0; }

const char* cachealloc_backend_name(void) { return Runtime::instance().backend_name().c_str(); }

int cachealloc_cuda_support(const char** detail) {
  thread_local std::string text;
  int status = -1;
#ifdef CACHEALLOC_WITH_CUDA
  try {
    const std::string& path = cachealloc::cuda_runtime_library();
    text = path + " (version " + std::to_string(cachealloc::cuda_runtime_version()) + ")";
    status = 1;
  } catch (const std::exception& e) {
    text = e.what();
    status = 0;
  }
#else
  text = "this build of cachealloc has no CUDA backends: the CUDA headers were not found when it "
         "was built. Reinstall it with torch's CUDA build present (pip install "
         "--no-build-isolation --force-reinstall cachealloc), or with CUDA_HOME set to a toolkit";
#endif
  if (detail) *detail = text.c_str();
  return status;
}

const char* cachealloc_last_error(void) { return last_error.c_str(); }

int cachealloc_device_count(void) {
  int n = -1;
  guarded([&] { n = initialized_runtime().device_count(); });
  return n;
}

int cachealloc_stat_count(void) { return static_cast<int>(stat_names().size()); }

const char* cachealloc_stat_name(int index) {
  if (index < 0 || index >= cachealloc_stat_count()) return nullptr;
  return stat_names()[static_cast<size_t>(index)].c_str();
}

int cachealloc_memory_stats(int device, int64_t* out, int n) {
  return guarded([&] {
    if (!out || n < 0) throw std::invalid_argument("cachealloc_memory_stats: bad output buffer");
    const auto kv = initialized_runtime().stats(device).key_values();
    for (size_t i = 0; i < kv.size() && static_cast<int>(i) < n; ++i) out[i] = kv[i].second;
  });
}

int cachealloc_reset_peak_stats(int device) {
  return guarded([&] { initialized_runtime().reset_peak(device); });
}

int cachealloc_reset_accumulated_stats(int device) {
  return guarded([&] { initialized_runtime().reset_accumulated(device); });
}

int cachealloc_empty_cache(int device) {
  return guarded([&] { initialized_runtime().current().allocator.empty_cache(device); });
}

int cachealloc_enable_peer_access(int dev, int dev_to_access) {
  return guarded([&] { initialized_runtime().enable_peer_access(dev, dev_to_access); });
}

int cachealloc_set_memory_fraction(double fraction, int device) {
  return guarded([&] { initialized_runtime().current().allocator.set_memory_fraction(fraction, device); });
}

int cachealloc_cache_info(int device, size_t* largest) {
  return guarded([&] {
    if (!largest) throw std::invalid_argument("cachealloc_cache_info: largest is NULL");
    *largest = initialized_runtime().current().allocator.with_device(
        device, [](cachealloc::DeviceCachingAllocator& e) { return e.largest_cached_block(); });
  });
}

int cachealloc_record_stream(void* ptr, void* stream) {
  return guarded([&] {
    initialized_runtime().on_allocator([&](cachealloc::CachingAllocator& a) {
      a.record_stream(reinterpret_cast<uintptr_t>(ptr), reinterpret_cast<uintptr_t>(stream));
    });
  });
}

void* cachealloc_base_allocation(void* ptr, size_t* size) {
  void* base = nullptr;
  guarded([&] {
    base = reinterpret_cast<void*>(
        initialized_runtime().on_allocator([&](cachealloc::CachingAllocator& a) {
          return a.base_allocation(reinterpret_cast<uintptr_t>(ptr), size);
        }));
  });
  return base;
}

int cachealloc_share_expandable(void* ptr, char* out, size_t capacity, size_t* length,
                                size_t* offset) {
  bool expandable = false;
  const int rc = guarded([&] {
    std::string bytes;
    size_t at = 0;
    expandable = initialized_runtime().share_expandable(reinterpret_cast<uintptr_t>(ptr), &bytes, &at);
    if (!expandable) return;
    *length = bytes.size();
    if (bytes.size() > capacity)
      throw std::length_error("cachealloc_share_expandable: the description takes " +
                              std::to_string(bytes.size()) + " bytes; the buffer holds " +
                              std::to_string(capacity));
    std::memcpy(out, bytes.data(), bytes.size());
    *offset = at;
  });
  return rc == 0 && !expandable ? 2 : rc;
}

int cachealloc_open_shared_expandable(int device, const char* bytes, size_t length, void** base) {
  return guarded([&] {
    *base = reinterpret_cast<void*>(
        initialized_runtime().open_shared_expandable(device, std::string_view(bytes, length)));
  });
}

int cachealloc_close_shared_expandable(void* base) {
  return guarded(
      [&] { initialized_runtime().close_shared_expandable(reinterpret_cast<uintptr_t>(base)); });
}

int cachealloc_current_bytes_of(int device, cachealloc_current_bytes* out) {
  return guarded([&] {
    if (!out) throw std::invalid_argument("cachealloc_current_bytes_of: out is NULL");
    const cachealloc::DeviceStats s = initialized_runtime().stats(device);
    out->allocated = s.allocated_bytes[cachealloc::kAllPools].current;
    out->reserved = s.reserved_bytes[cachealloc::kAllPools].current;
    out->active = s.active_bytes[cachealloc::kAllPools].current;
    out->inactive_split = s.inactive_split_bytes[cachealloc::kAllPools].current;
  });
}

int cachealloc_scope_open(int device, uint64_t* scope_id) {
  return guarded([&] {
    if (!scope_id) throw std::invalid_argument("cachealloc_scope_open: scope_id is NULL");
    *scope_id = initialized_runtime().scope_open(device);
  });
}

int cachealloc_scope_close(int device, uint64_t scope_id, cachealloc_scope_result* out) {
  return guarded([&] {
    const cachealloc::ScopeResult r = initialized_runtime().scope_close(device, scope_id);
    if (!out) return;
    out->depth = r.depth;
    out->allocated_at_open = r.allocated_at_open;
    out->allocated_at_close = r.allocated_at_close;
    out->peak_allocated = r.peak_allocated;
    out->peak_above_open = r.peak_above_open();
    out->self_peak_allocated = r.self_peak_allocated;
    out->self_peak_above_open = r.self_peak_above_open();
    out->bytes_allocated = r.bytes_allocated;
    out->bytes_freed = r.bytes_freed;
    out->self_bytes_allocated = r.self_bytes_allocated;
    out->self_bytes_freed = r.self_bytes_freed;
    out->allocations = r.allocations;
    out->frees = r.frees;
    out->self_allocations = r.self_allocations;
    out->self_frees = r.self_frees;
    out->reserved_at_open = r.reserved_at_open;
    out->reserved_at_close = r.reserved_at_close;
    out->peak_reserved = r.peak_reserved;
    out->self_peak_reserved = r.self_peak_reserved;
  });
}

int cachealloc_scope_depth(int device, int64_t* depth) {
  return guarded([&] {
    if (!depth) throw std::invalid_argument("cachealloc_scope_depth: depth is NULL");
    *depth = static_cast<int64_t>(initialized_runtime().scope_depth(device));
  });
}

int cachealloc_record_history(int enabled, int context, int python_stacks, size_t max_entries) {
  return guarded([&] {
    if (context < 0 || context > 3)
      throw std::invalid_argument("cachealloc_record_history: context must be 0..3, got " +
                                  std::to_string(context));
    if (enabled && max_entries == 0)
      throw std::invalid_argument("cachealloc_record_history: max_entries must be >= 1");
    initialized_runtime().record_history(enabled != 0,
                                         static_cast<cachealloc::ContextLevel>(context),
                                         python_stacks != 0, max_entries);
  });
}

int cachealloc_record_history_from(int enabled, int context, size_t max_entries,
                                   cachealloc_capture_fn capture, void* user,
                                   void (*release)(void*)) {
  return guarded([&] {
    if (context < 0 || context > 3)
      throw std::invalid_argument("cachealloc_record_history_from: context must be 0..3, got " +
                                  std::to_string(context));
    if (!capture) throw std::invalid_argument("cachealloc_record_history_from: capture is NULL");
    initialized_runtime().record_history_from(
        enabled != 0, static_cast<cachealloc::ContextLevel>(context), max_entries,
        cachealloc::ContextSource{capture, release, user});
  });
}

int cachealloc_history_enabled(void) {
  Runtime& r = Runtime::instance();
  return r.initialized() && r.history_enabled() ? 1 : 0;
}

int cachealloc_set_segment_callback(cachealloc_segment_event_fn fn, void* user) {
  return guarded([&] { initialized_runtime().set_segment_callback(fn, user); });
}

const char* cachealloc_history_action_names(void) {
  // Built once from the one list (kRecordedActions); static, never freed.
  static const std::string names = [] {
    std::string out;
    for (auto a : cachealloc::kRecordedActions)
      out += (out.empty() ? "" : ",") + std::string(cachealloc::action_name(a));
    return out;
  }();
  return names.c_str();
}

int cachealloc_set_history_skip_actions(const char* actions) {
  return guarded([&] {
    cachealloc::ActionMask skipped = 0;
    std::string_view rest = actions ? actions : "";
    // Every comma separates two names, so "alloc," and ",alloc" both hold
    // an empty (unknown) name.
    for (bool more = !rest.empty(); more;) {
      const size_t comma = rest.find(',');
      const std::string_view name = rest.substr(0, comma);
      more = comma != std::string_view::npos;
      rest = more ? rest.substr(comma + 1) : std::string_view();
      const auto action = cachealloc::parse_action(name);
      if (!action || *action == cachealloc::EventKind::kUserDefined)
        throw std::invalid_argument("skip_actions: unknown action '" + std::string(name) +
                                    "' (expected one of " + cachealloc_history_action_names() +
                                    ")");
      skipped |= cachealloc::action_bit(*action);
    }
    initialized_runtime().set_history_skipped(skipped);
  });
}

int cachealloc_snapshot_pickle(char** out, size_t* length) {
  return guarded([&] {
    if (!out || !length) throw std::invalid_argument("cachealloc_snapshot_pickle: NULL output");
    copy_out(cachealloc::write_pickle(initialized_runtime().snapshot()), out, length);
  });
}

void cachealloc_release_buffer(char* buffer) { std::free(buffer); }

int cachealloc_last_oom(cachealloc_oom_info* out) {
  if (!out) {
    set_last_error("cachealloc_last_oom: out is NULL");
    return -1;
  }
  if (!last_oom) {
    set_last_error("cachealloc_last_oom: no out-of-memory error on this thread");
    return -1;
  }
  const auto& d = *last_oom;
  *out = cachealloc_oom_info{d.device,         d.limit_set ? 1 : 0, d.requested_bytes,
                             d.rounded_bytes,  d.allocation_bytes,  d.device_total,
                             d.device_free,    d.allowed_bytes,     d.allocated_bytes,
                             d.reserved_bytes};
  return 0;
}

void cachealloc_set_oom_handler(void (*handler)(const char* message)) {
  Runtime::instance().set_oom_handler(handler);
}

}  // extern "C"
