#include "replay/trace.h"

#include <bit>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "allocator/base/errors.h"

namespace cachealloc {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& why) {
  throw TraceFormatError("trace: " + where + ": " + why);
}

const PyValue& field(const PyValue& dict, const char* key, const std::string& where) {
  if (dict.kind() != PyValue::Kind::kDict) bad(where, "expected a dict");
  const PyValue* v = dict.find(key);
  if (!v) bad(where, std::string("missing field '") + key + "'");
  return *v;
}

int64_t int_field(const PyValue& dict, const char* key, const std::string& where) {
  const PyValue& v = field(dict, key, where);
  if (v.kind() != PyValue::Kind::kInt)
    bad(where, std::string("field '") + key + "' is " + v.kind_name() + ", expected int");
  return v.as_int();
}

size_t size_field(const PyValue& dict, const char* key, const std::string& where) {
  int64_t v = int_field(dict, key, where);
  if (v < 0) bad(where, std::string("field '") + key + "' is negative");
  return static_cast<size_t>(v);
}

// A segment of a memory pool (torch.cuda.MemPool): the trace's entries do
// not say which requests were routed to the pool (torch 2.11 does not
// record it), so a replay cannot reproduce them and would only diverge
// further on. Refused, naming the pool. segment_pool_id is optional (older
// snapshots lack it); (0, 0) is the default pools.
void refuse_memory_pool(const PyValue& segment, const std::string& where) {
  const PyValue* id = segment.find("segment_pool_id");
  if (!id) return;
  const bool pair = (id->kind() == PyValue::Kind::kTuple || id->kind() == PyValue::Kind::kList) &&
                    id->items().size() == 2 && id->items()[0].kind() == PyValue::Kind::kInt &&
                    id->items()[1].kind() == PyValue::Kind::kInt;
  if (!pair) bad(where, std::string("field 'segment_pool_id' is ") + id->kind_name() +
                            ", expected a pair of ints");
  const int64_t first = id->items()[0].as_int(), second = id->items()[1].as_int();
  if (first == 0 && second == 0) return;
  bad(where, "belongs to memory pool (" + std::to_string(first) + ", " + std::to_string(second) +
                 "); traces of programs that used torch.cuda.MemPool cannot be replayed (they "
                 "do not record which requests went to a pool)");
}

// A str field's value (to share its text: PyValue::str_box).
const PyValue& str_value(const PyValue& dict, const char* key, const std::string& where) {
  const PyValue& v = field(dict, key, where);
  if (v.kind() != PyValue::Kind::kStr)
    bad(where, std::string("field '") + key + "' is " + v.kind_name() + ", expected str");
  return v;
}

const std::string& str_field(const PyValue& dict, const char* key, const std::string& where) {
  return str_value(dict, key, where).as_str();
}

// A list (or tuple) field's items.
const PyValue::List& list_field(const PyValue& dict, const char* key, const std::string& where) {
  const PyValue& v = field(dict, key, where);
  if (v.kind() != PyValue::Kind::kList && v.kind() != PyValue::Kind::kTuple)
    bad(where, std::string("field '") + key + "' is " + v.kind_name() + ", expected list");
  return v.items();
}

// The contexts made so far, by the frames list they were made from. A pickle
// can reference one list from any number of entries (2 bytes each); each
// list is then converted once, not once per entry.
using ContextCache = absl::flat_hash_map<const PyValue::List*, ContextPtr>;

// The entry's recorded frames as a context; null when it has none.
// A pickle can also reference one string (or one frame dict) from any number
// of frames, 2 bytes each: a frame shares the string the reader made
// (SharedString over PyValue::str_box) instead of copying it. A context then
// costs sizeof(StackFrame) (40 bytes) per frame reference, whatever the
// strings' lengths: memory follows the pickle's size, not the lengths of the
// strings times their references (copies made a 1.4 kB .pickle.gz need
// 20 GB). Throws TraceFormatError for a frame without a str name or
// filename or an int line.
ContextPtr frames_of(const PyValue& entry, const std::string& where, ContextCache& cache) {
  const PyValue* frames = entry.find("frames");
  if (!frames || frames->kind() != PyValue::Kind::kList || frames->items().empty())
    return nullptr;
  ContextPtr& cached = cache[&frames->items()];
  if (cached) return cached;
  auto ctx = std::make_shared<CallContext>();
  ctx->frames.reserve(frames->items().size());
  for (const PyValue& f : frames->items()) {
    StackFrame sf;
    sf.name = SharedString(str_value(f, "name", where).str_box());
    sf.filename = SharedString(str_value(f, "filename", where).str_box());
    sf.line = static_cast<int>(int_field(f, "line", where));
    ctx->frames.push_back(std::move(sf));
  }
  cached = ctx;
  return ctx;
}

// A setting's value as the trace holds it, for messages: 'no', 0.5, True,
// or the kind of a container.
std::string shown(const PyValue& v) {
  switch (v.kind()) {
    case PyValue::Kind::kNone: return "None";
    case PyValue::Kind::kBool: return v.as_bool() ? "True" : "False";
    case PyValue::Kind::kInt: return std::to_string(v.as_int());
    case PyValue::Kind::kFloat: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.as_float());
      std::string text = buf;
      // As Python prints a float: 1.0, not 1.
      if (text.find_first_of(".en") == std::string::npos) text += ".0";
      return text;
    }
    case PyValue::Kind::kStr: return "'" + v.as_str() + "'";
    default: return std::string("a ") + v.kind_name();
  }
}

// Reads the allocator_settings dict: each accessor checks the value's kind
// and throws TraceFormatError naming allocator_settings.<field> and the
// value; rule_check applies a config_rules rule and throws ConfigError.
class SettingsReader {
 public:
  explicit SettingsReader(const PyValue& settings) : s_(settings) {}

  const PyValue* optional(const std::string& key) const { return s_.find(key); }
  const PyValue& required(const std::string& key) const {
    const PyValue* v = s_.find(key);
    if (!v) throw TraceFormatError("trace: allocator_settings: missing field '" + key + "'");
    return *v;
  }
  [[noreturn]] void wrong_kind(const std::string& key, const PyValue& v,
                               const char* expected) const {
    const bool scalar = v.kind() != PyValue::Kind::kList && v.kind() != PyValue::Kind::kTuple &&
                        v.kind() != PyValue::Kind::kDict;
    throw TraceFormatError("trace: " + name(key) + " is " + shown(v) +
                           (scalar ? std::string(" (") + v.kind_name() + ")" : "") +
                           ", expected " + expected);
  }
  int64_t integer(const std::string& key, const PyValue& v) const {
    if (v.kind() != PyValue::Kind::kInt) wrong_kind(key, v, "int");
    return v.as_int();
  }
  double number(const std::string& key, const PyValue& v) const {
    if (v.kind() != PyValue::Kind::kFloat && v.kind() != PyValue::Kind::kInt)
      wrong_kind(key, v, "float");
    return v.as_float();
  }
  bool boolean(const std::string& key, const PyValue& v) const {
    if (v.kind() != PyValue::Kind::kBool) wrong_kind(key, v, "bool");
    return v.as_bool();
  }
  void rule_check(const std::string& key, const std::optional<std::string>& problem,
                  const std::string& value) const {
    if (problem) throw ConfigError("trace: " + name(key) + ": " + *problem + ", got " + value);
  }
  static std::string name(const std::string& key) { return "allocator_settings." + key; }

 private:
  const PyValue& s_;
};

}  // namespace

AllocatorConfig config_from_settings(const PyValue& settings) {
  if (settings.kind() != PyValue::Kind::kDict)
    throw TraceFormatError(std::string("trace: allocator_settings is ") + settings.kind_name() +
                           ", expected dict");
  const SettingsReader r(settings);
  AllocatorConfig c;
  if (const PyValue* conf = r.optional("PYTORCH_CUDA_ALLOC_CONF")) {
    if (conf->kind() != PyValue::Kind::kStr) r.wrong_kind("PYTORCH_CUDA_ALLOC_CONF", *conf, "str");
    c.source = conf->as_str();
  }
  // The dict carries neither large_segment_size nor max_non_split_rounding:
  // both come from the settings text, which is native's
  // last_allocator_settings (the environment's text, or the last
  // _set_allocator_settings call's). max_non_split_rounding is exact from it
  // (every settings call resets it). large_segment_size persists across
  // calls, so a text that does not name it gives the default, which is wrong
  // when an earlier call set it and a later one replaced the text: replay
  // then diverges at the first 1-10 MiB segment, and the divergence says so
  // (see large_segment_hint in lockstep_replay.cc).
  if (!c.source.empty()) {
    AllocatorConfig from_text;
    try {
      from_text = AllocatorConfig::parse(c.source);
    } catch (const ConfigError& e) {
      throw ConfigError("trace: " + r.name("PYTORCH_CUDA_ALLOC_CONF") + ": " + e.what());
    }
    c.large_segment_size = from_text.large_segment_size;
    c.max_non_split_rounding_size = from_text.max_non_split_rounding_size;
  }
  // Native stores its size_t as an int64: -1 is "unlimited" (SIZE_MAX),
  // other negatives are byte counts of 2^63 and up (max_split_size_mb
  // clamped to the largest representable count), so the bits are read back
  // as size_t.
  const PyValue& split = r.required("max_split_size");
  c.max_split_size = static_cast<size_t>(r.integer("max_split_size", split));
  if (c.max_split_size != AllocatorConfig::kUnlimitedSplit)
    r.rule_check("max_split_size", config_rules::split_limit(c.max_split_size, c.large_segment_size),
                 shown(split));
  // 0.0 is how native writes "not set"; any other value obeys the rule a
  // config string's garbage_collection_threshold does.
  const PyValue& gc = r.required("garbage_collection_threshold");
  c.garbage_collection_threshold = r.number("garbage_collection_threshold", gc);
  if (c.garbage_collection_threshold != 0.0)
    r.rule_check("garbage_collection_threshold",
                 config_rules::gc_threshold(c.garbage_collection_threshold), shown(gc));
  if (const PyValue* e = r.optional("expandable_segments"))
    c.expandable_segments = r.boolean("expandable_segments", *e);
  for (auto [key, field] : {std::pair{"release_lock_on_cudamalloc", &AllocatorConfig::release_lock_on_cudamalloc},
                            {"pinned_use_cuda_host_register", &AllocatorConfig::pinned_use_cuda_host_register},
                            {"graph_capture_record_stream_reuse", &AllocatorConfig::graph_capture_record_stream_reuse}})
    if (const PyValue* v = r.optional(key)) c.*field = r.boolean(key, *v);
  if (const PyValue* v = r.optional("pinned_num_register_threads")) {
    const int64_t n = r.integer("pinned_num_register_threads", *v);
    if (n < 0) r.rule_check("pinned_num_register_threads", "must not be negative", shown(*v));
    c.pinned_num_register_threads = static_cast<size_t>(n);
    r.rule_check("pinned_num_register_threads",
                 config_rules::register_threads(c.pinned_num_register_threads), shown(*v));
  }
  // {"1": divisions, "2": ..., "32768": ...}: interval start in MiB (a
  // power of two, as str) -> divisions for that interval.
  if (const PyValue* d = r.optional("roundup_power2_divisions")) {
    const std::string key = "roundup_power2_divisions";
    if (d->kind() != PyValue::Kind::kDict) r.wrong_kind(key, *d, "dict");
    for (const auto& [k, v] : d->as_dict()) {
      if (k.kind() != PyValue::Kind::kStr) r.wrong_kind(key + " key", k, "str");
      const std::string& interval = k.as_str();
      const std::string at = key + "['" + interval + "']";
      const bool digits = !interval.empty() && interval.size() <= 19 &&
                          interval.find_first_not_of("0123456789") == std::string::npos;
      const size_t mib = digits ? std::stoull(interval) : 0;
      if (!std::has_single_bit(mib))
        throw TraceFormatError("trace: " + r.name(key) + ": interval '" + interval +
                               "' is not a power-of-two number of MiB");
      const size_t index = std::bit_width(mib) - 1;
      if (index >= AllocatorConfig::kRoundupIntervals)
        throw TraceFormatError("trace: " + r.name(key) + ": interval '" + interval +
                               "' MiB is beyond the last (" +
                               std::to_string(size_t{1} << (AllocatorConfig::kRoundupIntervals - 1)) +
                               ")");
      const int64_t n = r.integer(at, v);
      if (n < 0) r.rule_check(at, "must not be negative", shown(v));
      r.rule_check(at, config_rules::divisions(static_cast<size_t>(n)), shown(v));
      c.roundup_power2_divisions[index] = static_cast<size_t>(n);
    }
  }
  return c;
}

RecordedTrace parse_trace(const PyValue& snap, bool keep_frames) {
  if (snap.kind() != PyValue::Kind::kDict)
    bad("top level", std::string("expected a dict, got ") + snap.kind_name());
  RecordedTrace t;
  if (const PyValue* s = snap.find("allocator_settings")) {
    t.config = config_from_settings(*s);
    t.has_settings = true;
  }
  const PyValue& traces = field(snap, "device_traces", "top level");
  if (traces.kind() != PyValue::Kind::kList) bad("device_traces", "expected a list");
  // Each device costs a replay engine: a short pickle must not ask for
  // millions of them.
  if (traces.items().size() > kMaxTraceDevices)
    bad("device_traces", std::to_string(traces.items().size()) + " devices, more than " +
                             std::to_string(kMaxTraceDevices));
  ContextCache contexts;
  for (size_t dev = 0; dev < traces.items().size(); ++dev) {
    const PyValue& list = traces.items()[dev];
    if (list.kind() != PyValue::Kind::kList)
      bad("device_traces[" + std::to_string(dev) + "]", "expected a list");
    std::vector<RecordedEvent> events;
    events.reserve(list.items().size());
    for (size_t i = 0; i < list.items().size(); ++i) {
      const PyValue& e = list.items()[i];
      const std::string where = "device " + std::to_string(dev) + " entry " + std::to_string(i);
      const PyValue& action = field(e, "action", where);
      if (action.kind() != PyValue::Kind::kStr) bad(where, "action is not a string");
      const std::string& a = action.as_str();
      RecordedEvent r;
      const std::optional<EventKind> kind = parse_action(a);
      if (kind && is_replayed_action(*kind)) r.action = *kind;
      else if (kind) { ++t.skipped_entries; continue; }  // snapshot, user_defined
      else bad(where, "unknown action '" + a + "'");
      if (r.action == EventKind::kOom) r.device_free = size_field(e, "device_free", where);
      else r.address = static_cast<uintptr_t>(size_field(e, "addr", where));
      r.size = size_field(e, "size", where);
      r.stream = static_cast<StreamId>(int_field(e, "stream", where));
      if (const PyValue* tu = e.find("time_us"); tu && tu->kind() == PyValue::Kind::kInt)
        r.time_us = tu->as_int();
      r.source_index = i;
      if (const PyValue* g = e.find("fallible_group"); g && r.action == EventKind::kAlloc) {
        if (g->kind() != PyValue::Kind::kInt || g->as_int() < 0 || g->as_int() > INT32_MAX)
          bad(where, "fallible_group is not an int in [0, 2^31)");
        r.fallible_group = static_cast<uint32_t>(g->as_int());
      }
      if (keep_frames) r.context = frames_of(e, where, contexts);
      events.push_back(std::move(r));
    }
    t.devices.push_back(std::move(events));
  }
  if (const PyValue* segs = snap.find("segments"); segs && segs->kind() == PyValue::Kind::kList) {
    for (size_t i = 0; i < segs->items().size(); ++i) {
      const PyValue& s = segs->items()[i];
      const std::string where = "segment " + std::to_string(i);
      RecordedSegment rs;
      rs.address = static_cast<uintptr_t>(size_field(s, "address", where));
      rs.total_size = size_field(s, "total_size", where);
      rs.is_small = str_field(s, "segment_type", where) == "small";
      refuse_memory_pool(s, where);
      const PyValue::List& blocks = list_field(s, "blocks", where);
      for (size_t k = 0; k < blocks.size(); ++k) {
        const std::string at = where + " block " + std::to_string(k);
        const size_t size = size_field(blocks[k], "size", at);
        const std::string& state = str_field(blocks[k], "state", at);
        // Only the states a snapshot can hold are kept: a state is copied
        // per block, and a pickle can reference one huge string from every
        // block for 2 bytes each.
        if (state != "active_allocated" && state != "active_pending_free" && state != "inactive")
          bad(at, "unknown state '" + state.substr(0, 40) + (state.size() > 40 ? "...'" : "'"));
        rs.blocks.emplace_back(size, state);
      }
      const int64_t device = int_field(s, "device", where);
      if (device < 0 || static_cast<uint64_t>(device) >= kMaxTraceDevices)
        bad(where, "device " + std::to_string(device) + " is not in [0, " +
                       std::to_string(kMaxTraceDevices) + ")");
      t.final_segments.push_back(std::move(rs));
      t.final_segment_devices.push_back(static_cast<int>(device));
    }
  }
  return t;
}

}  // namespace cachealloc
