#include "replay/trace.h"

#include <bit>

#include "allocator/errors.h"

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

ContextPtr frames_of(const PyValue& entry, const std::string& where) {
  const PyValue* frames = entry.find("frames");
  if (!frames || frames->kind() != PyValue::Kind::kList || frames->items().empty())
    return nullptr;
  auto ctx = std::make_shared<CallContext>();
  for (const PyValue& f : frames->items()) {
    StackFrame sf;
    sf.name = field(f, "name", where).as_str();
    sf.filename = field(f, "filename", where).as_str();
    sf.line = static_cast<int>(int_field(f, "line", where));
    ctx->frames.push_back(std::move(sf));
  }
  return ctx;
}

}  // namespace

const char* recorded_action_name(RecordedAction a) {
  switch (a) {
    case RecordedAction::kSegmentAlloc: return "segment_alloc";
    case RecordedAction::kSegmentFree: return "segment_free";
    case RecordedAction::kAlloc: return "alloc";
    case RecordedAction::kFreeRequested: return "free_requested";
    case RecordedAction::kFreeCompleted: return "free_completed";
    case RecordedAction::kOom: return "oom";
  }
  return "unknown";
}

AllocatorConfig config_from_settings(const PyValue& s) {
  const std::string where = "allocator_settings";
  AllocatorConfig c;
  if (const PyValue* conf = s.find("PYTORCH_CUDA_ALLOC_CONF");
      conf && conf->kind() == PyValue::Kind::kStr)
    c.source = conf->as_str();
  const int64_t split = int_field(s, "max_split_size", where);
  c.max_split_size = split < 0 ? AllocatorConfig::kUnlimitedSplit : static_cast<size_t>(split);
  const PyValue& gc = field(s, "garbage_collection_threshold", where);
  c.garbage_collection_threshold = gc.as_float();
  if (const PyValue* e = s.find("expandable_segments"); e && e->as_bool())
    throw ConfigError("trace was recorded with expandable_segments:True, which cachealloc does not support yet");
  if (const PyValue* d = s.find("roundup_power2_divisions")) {
    for (const auto& [k, v] : d->as_dict()) {
      const std::string& key = k.as_str();
      size_t mib = std::stoull(key);
      if (!std::has_single_bit(mib)) bad(where, "roundup interval '" + key + "' is not a power of two");
      size_t index = std::bit_width(mib) - 1;
      if (index >= AllocatorConfig::kRoundupIntervals) bad(where, "roundup interval '" + key + "' out of range");
      if (v.as_int() < 0) bad(where, "negative roundup divisions");
      c.roundup_power2_divisions[index] = static_cast<size_t>(v.as_int());
    }
  }
  return c;
}

RecordedTrace parse_trace(const PyValue& snap, bool keep_frames) {
  if (snap.kind() != PyValue::Kind::kDict)
    bad("top level", std::string("expected a dict, got ") + snap.kind_name());
  RecordedTrace t;
  if (const PyValue* s = snap.find("allocator_settings");
      s && s->kind() == PyValue::Kind::kDict) {
    t.config = config_from_settings(*s);
    t.has_settings = true;
  }
  const PyValue& traces = field(snap, "device_traces", "top level");
  if (traces.kind() != PyValue::Kind::kList) bad("device_traces", "expected a list");
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
      if (a == "segment_alloc") r.action = RecordedAction::kSegmentAlloc;
      else if (a == "segment_free") r.action = RecordedAction::kSegmentFree;
      else if (a == "alloc") r.action = RecordedAction::kAlloc;
      else if (a == "free_requested") r.action = RecordedAction::kFreeRequested;
      else if (a == "free_completed") r.action = RecordedAction::kFreeCompleted;
      else if (a == "oom") r.action = RecordedAction::kOom;
      else if (a == "snapshot" || a == "user_defined") { ++t.skipped_entries; continue; }
      else if (a == "segment_map" || a == "segment_unmap")
        bad(where, "expandable-segment traces (" + a + ") are not supported yet");
      else bad(where, "unknown action '" + a + "'");
      if (r.action == RecordedAction::kOom) r.device_free = size_field(e, "device_free", where);
      else r.address = static_cast<uintptr_t>(size_field(e, "addr", where));
      r.size = size_field(e, "size", where);
      r.stream = static_cast<StreamId>(int_field(e, "stream", where));
      if (const PyValue* tu = e.find("time_us"); tu && tu->kind() == PyValue::Kind::kInt)
        r.time_us = tu->as_int();
      r.source_index = i;
      if (keep_frames) r.context = frames_of(e, where);
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
      rs.is_small = field(s, "segment_type", where).as_str() == "small";
      for (const PyValue& b : field(s, "blocks", where).items())
        rs.blocks.emplace_back(size_field(b, "size", where), field(b, "state", where).as_str());
      t.final_segments.push_back(std::move(rs));
      t.final_segment_devices.push_back(static_cast<int>(int_field(s, "device", where)));
    }
  }
  return t;
}

}  // namespace cachealloc
