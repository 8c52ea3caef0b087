#include "lab/oom_state.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/engine/blocks/size_policy.h"
#include "replay/trace.h"

namespace cachealloc {
namespace {

size_t bytes_of(const PyValue& v, std::string_view key) {
  const PyValue* f = v.find(key);
  if (!f || f->kind() != PyValue::Kind::kInt) return 0;
  const int64_t i = f->as_int();
  return i < 0 ? 0 : static_cast<size_t>(i);
}

std::string str_of(const PyValue& v, std::string_view key) {
  const PyValue* f = v.find(key);
  return f && f->kind() == PyValue::Kind::kStr ? f->as_str() : std::string();
}

const PyValue::List& list_of(const PyValue& v, std::string_view key) {
  static const PyValue::List kEmpty;
  const PyValue* f = v.find(key);
  return f && f->kind() == PyValue::Kind::kList ? f->items() : kEmpty;
}

bool is_free(const std::string& state) { return state == "inactive"; }

// Library frames (torch's and cachealloc's own code) are told from the
// program's by where those packages are installed, never by a substring
// of the path: a checkout named "cachealloc" or a script under a folder
// named "torch" is the program's code. A snapshot cachealloc wrote carries
// the install folders under "cachealloc_library_prefixes"
// (bindings/python/cachealloc/library_frames.py); one without them
// (native's own dumps) falls back to: a frame under a site-packages or
// dist-packages folder is a library's.
std::vector<std::string> library_prefixes_of(const PyValue& snapshot) {
  std::vector<std::string> out;
  for (const PyValue& p : list_of(snapshot, "cachealloc_library_prefixes"))
    if (p.kind() == PyValue::Kind::kStr && !p.as_str().empty()) out.push_back(p.as_str());
  return out;
}

bool is_library_file(const std::string& file, const std::vector<std::string>& prefixes) {
  if (!prefixes.empty())
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& p) { return file.compare(0, p.size(), p) == 0; });
  return file.find("/site-packages/") != std::string::npos ||
         file.find("/dist-packages/") != std::string::npos;
}

// The frame that names the program's code: the first Python frame outside
// the libraries (is_library_file), else the first Python frame, else the
// first frame.
std::string site_of(const PyValue& block, const std::vector<std::string>& prefixes) {
  const PyValue::List& frames = list_of(block, "frames");
  const PyValue* chosen = nullptr;
  const PyValue* first_py = nullptr;
  for (const PyValue& f : frames) {
    if (f.kind() != PyValue::Kind::kDict) continue;
    const std::string file = str_of(f, "filename");
    const bool py = file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0;
    if (!py) continue;
    if (!first_py) first_py = &f;
    if (!is_library_file(file, prefixes)) {
      chosen = &f;
      break;
    }
  }
  if (!chosen) chosen = first_py;
  if (!chosen && !frames.empty() && frames.front().kind() == PyValue::Kind::kDict)
    chosen = &frames.front();
  if (!chosen) return "";
  std::string file = str_of(*chosen, "filename");
  // The last two path components say enough and keep lines short.
  size_t cut = file.rfind('/');
  if (cut != std::string::npos && cut > 0) {
    const size_t before = file.rfind('/', cut - 1);
    if (before != std::string::npos) file = file.substr(before + 1);
  }
  return file + ":" + std::to_string(bytes_of(*chosen, "line")) + " (" + str_of(*chosen, "name") + ")";
}

// The device's trace entries.
const PyValue::List& trace_of(const PyValue& snapshot, int device) {
  static const PyValue::List kEmpty;
  const PyValue::List& traces = list_of(snapshot, "device_traces");
  if (device < 0 || static_cast<size_t>(device) >= traces.size()) return kEmpty;
  const PyValue& t = traces[static_cast<size_t>(device)];
  return t.kind() == PyValue::Kind::kList ? t.items() : kEmpty;
}

int device_of(const PyValue& segment) {
  const PyValue* d = segment.find("device");
  return d && d->kind() == PyValue::Kind::kInt ? static_cast<int>(d->as_int()) : 0;
}

}  // namespace

OomState read_oom_state(const PyValue& snapshot, std::optional<int> device,
                        std::optional<size_t> memory_limit) {
  if (snapshot.kind() != PyValue::Kind::kDict)
    throw PyValueError("snapshot: expected a dict at the top, found " +
                       std::string(snapshot.kind_name()));
  OomState s;
  const std::vector<std::string> library_prefixes = library_prefixes_of(snapshot);
  OomRequest& r = s.request;
  const PyValue* facts = snapshot.find("cachealloc_oom");
  if (facts && facts->kind() == PyValue::Kind::kDict) {
    r.recorded = true;
    r.device = static_cast<int>(bytes_of(*facts, "device"));
    r.requested = bytes_of(*facts, "requested");
    r.rounded = bytes_of(*facts, "rounded");
    r.allocation = bytes_of(*facts, "allocation");
    r.device_total = bytes_of(*facts, "device_total");
    r.device_free = bytes_of(*facts, "device_free");
    if (const PyValue* a = facts->find("allowed"); a && a->kind() == PyValue::Kind::kInt)
      r.allowed = static_cast<size_t>(std::max<int64_t>(0, a->as_int()));
    r.message = str_of(*facts, "message");
  } else {
    // The most recent "oom" entry of any device.
    const PyValue::List& traces = list_of(snapshot, "device_traces");
    int64_t latest = INT64_MIN;
    for (size_t d = 0; d < traces.size(); ++d) {
      if (traces[d].kind() != PyValue::Kind::kList) continue;
      for (const PyValue& e : traces[d].items()) {
        if (e.kind() != PyValue::Kind::kDict || str_of(e, "action") != "oom") continue;
        const PyValue* t = e.find("time_us");
        const int64_t when = t && t->kind() == PyValue::Kind::kInt ? t->as_int() : 0;
        if (when < latest) continue;
        latest = when;
        r.recorded = true;
        r.device = static_cast<int>(d);
        r.rounded = bytes_of(e, "size");
        r.device_free = bytes_of(e, "device_free");
        if (r.device_free == 0) r.device_free = bytes_of(e, "addr");
      }
    }
  }
  if (device) {
    r.device = *device;
  } else if (!r.recorded) {
    std::map<int, size_t> per_device;
    for (const PyValue& seg : list_of(snapshot, "segments")) ++per_device[device_of(seg)];
    size_t most = 0;
    for (auto [d, n] : per_device)
      if (n > most) most = n, r.device = d;
  }

  // Segments and blocks of the device.
  std::map<std::string, PinningSite> sites;
  absl::flat_hash_map<uintptr_t, std::pair<size_t, StreamId>> live_blocks;  // address -> (bytes, stream)
  for (const PyValue& seg : list_of(snapshot, "segments")) {
    if (seg.kind() != PyValue::Kind::kDict || device_of(seg) != r.device) continue;
    ++s.segments;
    const size_t total = bytes_of(seg, "total_size");
    s.reserved += total;
    uintptr_t at = bytes_of(seg, "address");
    const StreamId stream = bytes_of(seg, "stream");
    size_t free_bytes = 0, free_blocks = 0;
    bool live = false;
    std::set<std::string> seg_sites;
    std::map<std::string, size_t> live_by_site;
    for (const PyValue& b : list_of(seg, "blocks")) {
      if (b.kind() != PyValue::Kind::kDict) continue;
      const size_t size = bytes_of(b, "size");
      const uintptr_t address = b.find("address") ? bytes_of(b, "address") : at;
      at = address + size;
      if (is_free(str_of(b, "state"))) {
        ++free_blocks;
        free_bytes += size;
        s.largest_free = std::max(s.largest_free, size);
        continue;
      }
      live = true;
      s.allocated += size;
      const size_t requested = bytes_of(b, "requested_size");
      live_blocks[address] = {requested > 0 ? requested : size, stream};
      std::string where = site_of(b, library_prefixes);
      if (where.empty()) continue;
      live_by_site[where] += size;
      seg_sites.insert(std::move(where));
    }
    s.free_blocks += free_blocks;
    if (!live) continue;
    ++s.pinned_segments;
    if (free_blocks == 0) continue;
    ++s.split_segments;
    s.split_free_bytes += free_bytes;
    s.split_free_blocks += free_blocks;
    if (!seg_sites.empty()) s.frames_recorded = true;
    for (const std::string& where : seg_sites) {
      PinningSite& p = sites[where];
      p.where = where;
      p.free_bytes += free_bytes;
      p.segments += 1;
      p.live_bytes += live_by_site[where];
    }
  }
  for (auto& [where, p] : sites) s.sites.push_back(p);
  std::sort(s.sites.begin(), s.sites.end(), [](const PinningSite& a, const PinningSite& b) {
    return a.free_bytes != b.free_bytes ? a.free_bytes > b.free_bytes : a.where < b.where;
  });

  // The live state at the oldest trace entry: blocks freed in the trace
  // without being allocated in it, and blocks live at the end that the
  // trace never allocated.
  const PyValue::List& trace = trace_of(snapshot, r.device);
  s.history_entries = trace.size();
  if (const PyValue* ring = snapshot.find("cachealloc_request_ring");
      ring && ring->kind() == PyValue::Kind::kDict) {
    const auto at_device = [&](std::string_view key) -> const PyValue* {
      const PyValue::List& l = list_of(*ring, key);
      return r.device >= 0 && static_cast<size_t>(r.device) < l.size() ? &l[r.device] : nullptr;
    };
    const PyValue* source = at_device("source");
    const PyValue* wrapped = at_device("wrapped");
    s.trace_from_ring = source && source->kind() == PyValue::Kind::kStr && source->as_str() == "ring";
    s.ring_wrapped = s.trace_from_ring && wrapped && wrapped->kind() == PyValue::Kind::kBool &&
                     wrapped->as_bool();
    s.ring_bytes = bytes_of(*ring, "bytes_per_device");
  }
  if (r.recorded)
    for (size_t i = trace.size(); i-- > 0;) {
      if (trace[i].kind() == PyValue::Kind::kDict && str_of(trace[i], "action") == "oom") break;
      ++s.entries_after_oom;
    }
  if (!trace.empty()) {
    absl::flat_hash_set<uintptr_t> live;
    std::map<uintptr_t, InitialBlock> at_start;
    for (const PyValue& e : trace) {
      if (e.kind() != PyValue::Kind::kDict) continue;
      const std::string action = str_of(e, "action");
      const uintptr_t addr = bytes_of(e, "addr");
      if (action == "alloc") {
        live.insert(addr);
      } else if (action == "free_requested") {
        if (!live.erase(addr) && !at_start.count(addr))
          at_start[addr] = InitialBlock{addr, bytes_of(e, "size"), bytes_of(e, "stream")};
      }
    }
    for (const auto& [addr, bytes_stream] : live_blocks)
      if (!live.count(addr) && !at_start.count(addr))
        at_start[addr] = InitialBlock{addr, bytes_stream.first, bytes_stream.second};
    for (const auto& [addr, b] : at_start) {
      s.live_at_start.push_back(b);
      s.live_at_start_bytes += b.size;
    }
  }

  // Native's trace entry holds the rounded size; the segment it needed
  // follows from it (classic segments; an expandable segment maps pages).
  if (r.recorded && r.allocation == 0 && r.rounded > 0) {
    AllocatorConfig config;
    if (const PyValue* settings = snapshot.find("allocator_settings");
        settings && settings->kind() == PyValue::Kind::kDict)
      config = config_from_settings(*settings);
    r.allocation = segment_size_for(r.rounded, config.large_segment_size);
  }
  if (memory_limit) {
    r.allowed = memory_limit;
    r.allowed_inferred = false;
  } else if (!r.allowed && r.recorded && !facts) {
    // Native records no limit: what the device had left, plus what the
    // allocator held, is what it could have had (exact without a memory
    // fraction).
    r.allowed = s.reserved + r.device_free;
    r.allowed_inferred = true;
  }
  return s;
}

}  // namespace cachealloc
