#include "tests/cpp/trace_mutator.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace cachealloc {
namespace {

using Kind = PyValue::Kind;

// Bytes of the fixed-size argument of `op`, or -1 when the argument is
// length-prefixed (see prefix_bytes) or the opcode is not one we walk.
int fixed_arg_bytes(uint8_t op) {
  switch (op) {
    case '(': case '.': case '0': case '1': case '2': case 'N': case 0x88: case 0x89:
    case ']': case 'l': case 'a': case 'e': case '}': case 'd': case 's': case 'u':
    case ')': case 't': case 0x85: case 0x86: case 0x87: case 0x94:
    case 'R': case 'b': case 0x93: case 'o': case 0x81: case 0x92: case 'Q':
    case 0x97: case 0x98: case 0x8f: case 0x90: case 0x91:
      return 0;
    case 'K': case 'h': case 'q': case 0x80: case 0x82: return 1;
    case 'M': case 0x83: return 2;
    case 'J': case 'j': case 'r': case 0x84: return 4;
    case 'G': case 0x95: return 8;
    default: return -1;
  }
}

// Width of the little-endian length prefix of a length-prefixed opcode, or 0.
int prefix_bytes(uint8_t op) {
  switch (op) {
    case 0x8a: case 0x8c: case 'C': case 'U': return 1;
    case 0x8b: case 'X': case 'B': case 'T': return 4;
    case 0x8d: case 0x8e: case 0x96: return 8;
    default: return 0;
  }
}

uint64_t read_le(std::string_view b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(b[at + i])} << (8 * i);
  return v;
}

std::string le(uint64_t v, int n) {
  std::string s(static_cast<size_t>(n), '\0');
  for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

// Replaces dict[key] (the first entry with that key) or appends it.
void set_field(PyValue& dict, const std::string& key, PyValue value) {
  for (auto& [k, v] : dict.as_dict()) {
    if (k.kind() == Kind::kStr && k.as_str() == key) {
      v = std::move(value);
      return;
    }
  }
  dict.set(key, std::move(value));
}

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

}  // namespace

std::vector<PickleOp> pickle_ops(std::string_view bytes) {
  std::vector<PickleOp> ops;
  ops.reserve(bytes.size() / 3);  // Snapshot opcodes average 3 to 5 bytes.
  size_t pos = 2;
  while (pos < bytes.size()) {
    const auto code = static_cast<uint8_t>(bytes[pos]);
    size_t len;
    if (const int fixed = fixed_arg_bytes(code); fixed >= 0) {
      len = 1 + static_cast<size_t>(fixed);
    } else if (const int prefix = prefix_bytes(code); prefix > 0) {
      if (bytes.size() - pos - 1 < static_cast<size_t>(prefix)) break;
      const uint64_t n = read_le(bytes, pos + 1, prefix);
      if (n > bytes.size() - pos - 1 - static_cast<size_t>(prefix)) break;
      len = 1 + static_cast<size_t>(prefix) + n;
    } else {
      break;
    }
    if (len > bytes.size() - pos) break;
    ops.push_back(PickleOp{pos, len, code});
    pos += len;
  }
  return ops;
}

PyValue deep_copy(const PyValue& v) {
  switch (v.kind()) {
    case Kind::kList:
    case Kind::kTuple: {
      PyValue::List items;
      items.reserve(v.items().size());
      for (const PyValue& x : v.items()) items.push_back(deep_copy(x));
      return v.kind() == Kind::kList ? PyValue::list(std::move(items))
                                     : PyValue::tuple(std::move(items));
    }
    case Kind::kDict: {
      PyValue::Dict d;
      d.reserve(v.as_dict().size());
      for (const auto& [k, x] : v.as_dict()) d.emplace_back(deep_copy(k), deep_copy(x));
      return PyValue::dict(std::move(d));
    }
    default:
      return v;  // Scalars and (immutable) strings.
  }
}

// ---------------------------------------------------------------- bytes

size_t TraceMutator::boundary(const std::string& b, const std::vector<PickleOp>& ops) {
  if (ops.empty()) return std::min<size_t>(2, b.size());
  const size_t k = below(ops.size() + 1);
  return k == ops.size() ? ops.back().offset + ops.back().length : ops[k].offset;
}

std::string TraceMutator::random_op() {
  static constexpr uint8_t kNoArg[] = {'(', '.', '0', '1', '2', 'N', 0x88, 0x89, ']', 'l', 'a',
                                       'e', '}', 'd', 's', 'u', ')', 't', 0x85, 0x86, 0x87, 0x94,
                                       'R', 'b', 0x93, 0x8f, 0x97};
  const auto arg = [this](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += static_cast<char>(below(256));
    return s;
  };
  switch (below(14)) {
    case 0: case 1: case 2: case 3: case 4:
      return std::string(1, static_cast<char>(kNoArg[below(std::size(kNoArg))]));
    case 5: return "K" + arg(1);
    case 6: return "M" + arg(2);
    case 7: return "J" + arg(4);
    case 8: return std::string("h") + static_cast<char>(below(8));
    case 9: {  // A string, sometimes with a length that lies.
      const std::string text = one_in(4) ? arg(static_cast<int>(below(6))) : "addr";
      const uint64_t n = one_in(4) ? below(1u << 20) : text.size();
      switch (below(3)) {
        case 0: return "\x8c" + le(n, 1) + text;
        case 1: return "X" + le(n, 4) + text;
        default: return "\x8d" + le(n, 8) + text;
      }
    }
    case 10: {  // LONG1 / LONG4 of 0 to 12 bytes.
      const int n = static_cast<int>(below(13));
      return one_in(2) ? "\x8a" + le(static_cast<uint64_t>(n), 1) + arg(n)
                       : "\x8b" + le(static_cast<uint64_t>(n), 4) + arg(n);
    }
    case 11: return "G" + arg(8);
    case 12: return std::string("\x95", 1) + le(below(64), 8);
    default: return std::string("\x80", 1) + static_cast<char>(below(8));
  }
}

void TraceMutator::flip_bytes(std::string& b) {
  if (b.empty()) return;
  const size_t n = 1 + below(8);
  for (size_t i = 0; i < n; ++i) {
    const size_t at = below(b.size());
    switch (below(3)) {
      case 0: b[at] = static_cast<char>(b[at] ^ (1 << below(8))); break;
      case 1: b[at] = static_cast<char>(below(256)); break;
      default: {
        static constexpr uint8_t kInteresting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, '.', '(',
                                                   'h', 'j', 0x94, 0x95, 0x8d, 0x8b, 'a', 's'};
        b[at] = static_cast<char>(kInteresting[below(std::size(kInteresting))]);
      }
    }
  }
}

void TraceMutator::truncate(std::string& b, const std::vector<PickleOp>& ops) {
  size_t at;
  switch (below(3)) {
    case 0: at = below(b.size() + 1); break;
    case 1: at = boundary(b, ops); break;
    default: {  // Inside an opcode's argument: just after the opcode byte.
      at = ops.empty() ? 0 : ops[below(ops.size())].offset + 1 + below(2);
    }
  }
  // Usually keep a STOP so the reader reaches the cut with a stack to unwind.
  b.resize(std::min(at, b.size()));
  if (!one_in(3)) b += '.';
}

void TraceMutator::insert_ops(std::string& b, const std::vector<PickleOp>& ops) {
  const size_t at = boundary(b, ops);
  std::string ins;
  const size_t n = 1 + below(4);
  for (size_t i = 0; i < n; ++i) ins += random_op();
  b.insert(at, ins);
}

void TraceMutator::delete_op(std::string& b, const std::vector<PickleOp>& ops) {
  if (ops.empty()) return;
  const PickleOp& op = ops[below(ops.size())];
  b.erase(op.offset, op.length);
}

void TraceMutator::duplicate_ops(std::string& b, const std::vector<PickleOp>& ops) {
  if (ops.empty()) return;
  // Copy a run of up to 32 opcodes, 1 to 4 times, to any boundary.
  const size_t first = below(ops.size());
  const size_t last = std::min(ops.size(), first + 1 + below(32));
  const std::string run =
      b.substr(ops[first].offset, ops[last - 1].offset + ops[last - 1].length - ops[first].offset);
  std::string copies;
  for (size_t i = 0, n = 1 + below(4); i < n; ++i) copies += run;
  b.insert(one_in(2) ? ops[first].offset : boundary(b, ops), copies);
}

void TraceMutator::huge_length(std::string& b, const std::vector<PickleOp>& ops) {
  std::vector<const PickleOp*> with_length;
  for (const PickleOp& op : ops)
    if (prefix_bytes(op.code) > 0 || op.code == 0x95 || op.code == 'j' || op.code == 'r')
      with_length.push_back(&op);
  if (with_length.empty()) {
    // None to edit: add a FRAME or BINUNICODE8 that claims everything.
    b.insert(boundary(b, ops), one_in(2) ? std::string("\x95", 1) + le(~uint64_t{0}, 8)
                                         : std::string("\x8d", 1) + le(uint64_t{1} << 63, 8));
    return;
  }
  const PickleOp& op = *with_length[below(with_length.size())];
  const int width = prefix_bytes(op.code) > 0 ? prefix_bytes(op.code) : op.code == 0x95 ? 8 : 4;
  const uint64_t old = read_le(b, op.offset + 1, width);
  const uint64_t max = width == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1;
  const uint64_t choices[] = {max, max - 1, max / 2, max / 2 + 1, old + 1, old - 1, 0,
                              b.size(), b.size() - op.offset, uint64_t{1} << 31,
                              uint64_t{1} << 32, uint64_t{1} << 62};
  b.replace(op.offset + 1, static_cast<size_t>(width),
            le(choices[below(std::size(choices))] & max, width));
}

void TraceMutator::deep_nesting(std::string& b, const std::vector<PickleOp>& ops) {
  const size_t depth = one_in(3) ? 995 + below(10) : 1 + below(3000);
  std::string nest;
  switch (below(4)) {
    case 0: nest = std::string(depth, ']') + std::string(depth - 1, 'a'); break;  // [[[...]]]
    case 1: nest = "N" + std::string(depth, '\x85'); break;                        // ((...),)
    case 2: nest = std::string(depth, '(') + "N" + std::string(depth, 't'); break;
    default: nest = std::string(depth, '}'); break;  // Unclosed: left on the stack.
  }
  b.insert(boundary(b, ops), nest);
}

void TraceMutator::memo_abuse(std::string& b, const std::vector<PickleOp>& ops) {
  std::string ins;
  switch (below(6)) {
    case 0: ins = std::string("h") + static_cast<char>(below(256)); break;
    case 1: ins = "j" + le(one_in(2) ? 0xffffffffu : below(uint64_t{1} << 32), 4); break;
    case 2: ins = std::string(1 + below(2000), '\x94'); break;  // MEMOIZE runs.
    case 3: ins = "r" + le(0xffffffffu, 4) + "j" + le(0xffffffffu, 4); break;
    case 4: ins = "(q\x05"; break;  // BINPUT with nothing above the MARK.
    default: {
      // PUT sparse indexes, then GET them back many times.
      for (int i = 0; i < 8; ++i) ins += "r" + le(below(uint64_t{1} << 32), 4);
      for (size_t i = 0, n = below(2000); i < n; ++i) ins += "2";
    }
  }
  b.insert(boundary(b, ops), ins);
}

void TraceMutator::change_after_nesting(std::string& b, const std::vector<PickleOp>& ops) {
  // BINGET a memoized container, then APPEND/SETITEM(S) into it: allowed only
  // if it was never nested.
  size_t memoized = 0;
  for (const PickleOp& op : ops) memoized += op.code == 0x94;
  const uint64_t index = memoized == 0 ? 0 : below(memoized);
  std::string get = index < 256 ? std::string("h") + static_cast<char>(index) : "j" + le(index, 4);
  static const char* kTails[] = {"Na", "NNs", "(Ne", "(NNu", "h\x00""a", "2a"};
  b.insert(boundary(b, ops), get + kTails[below(std::size(kTails))]);
}

void TraceMutator::bad_utf8(std::string& b, const std::vector<PickleOp>& ops) {
  std::vector<const PickleOp*> strs;
  for (const PickleOp& op : ops)
    if ((op.code == 0x8c || op.code == 'X' || op.code == 0x8d) &&
        op.length > 1 + static_cast<size_t>(prefix_bytes(op.code)))
      strs.push_back(&op);
  if (strs.empty()) return;
  const PickleOp& op = *strs[below(strs.size())];
  const size_t text = op.offset + 1 + static_cast<size_t>(prefix_bytes(op.code));
  static constexpr uint8_t kBad[] = {0x80, 0xc0, 0xed, 0xf4, 0xf8, 0xff, 0xc3, 0xe2};
  b[text + below(op.offset + op.length - text)] = static_cast<char>(kBad[below(std::size(kBad))]);
}

void TraceMutator::edit_int(std::string& b, const std::vector<PickleOp>& ops) {
  std::vector<const PickleOp*> ints;
  for (const PickleOp& op : ops)
    if (op.code == 'K' || op.code == 'M' || op.code == 'J' || op.code == 0x8a) ints.push_back(&op);
  if (ints.empty()) return;
  const PickleOp& op = *ints[below(ints.size())];
  const PyValue v = interesting_int();
  const auto x = static_cast<uint64_t>(v.as_int());
  std::string enc;
  switch (below(4)) {
    case 0: enc = "\x8a\x08" + le(x, 8); break;
    case 1: enc = "J" + le(x, 4); break;
    case 2: enc = "\x8a\x09" + le(x, 8) + (one_in(2) ? "\x00" : "\x01"); break;  // 9 bytes
    default: enc = std::string("\x8b\x0c\x00\x00\x00", 5) + le(x, 8) + le(~uint64_t{0}, 4);
  }
  b.replace(op.offset, op.length, enc);
}

void TraceMutator::insert_frame(std::string& b, const std::vector<PickleOp>& ops) {
  const size_t at = boundary(b, ops);
  const uint64_t rest = b.size() - at;
  const uint64_t lengths[] = {0, rest, rest + 1, rest / 2, below(rest + 1), ~uint64_t{0}};
  b.insert(at, std::string("\x95", 1) + le(lengths[below(std::size(lengths))], 8));
}

std::string TraceMutator::mutate_bytes(std::string b) {
  for (size_t n = 1 + below(4), i = 0; i < n; ++i) {
    const std::vector<PickleOp> ops = pickle_ops(b);
    switch (below(14)) {
      case 0: case 1: flip_bytes(b); break;
      case 2: truncate(b, ops); break;
      case 3: insert_ops(b, ops); break;
      case 4: delete_op(b, ops); break;
      case 5: duplicate_ops(b, ops); break;
      case 6: huge_length(b, ops); break;
      case 7: deep_nesting(b, ops); break;
      case 8: memo_abuse(b, ops); break;
      case 9: change_after_nesting(b, ops); break;
      case 10: bad_utf8(b, ops); break;
      case 11: edit_int(b, ops); break;
      case 12: insert_frame(b, ops); break;
      default: {  // Bytes after STOP, or a second pickle.
        b += one_in(2) ? std::string(1 + below(4), static_cast<char>(below(256))) : b;
      }
    }
  }
  return b;
}

// ---------------------------------------------------------------- content

PyValue TraceMutator::interesting_int() {
  static constexpr int64_t kValues[] = {
      0, 1, -1, 2, 511, 512, 513, 1048575, 1048576, 1048577, 2097152, 10485760, 20971520,
      int64_t{1} << 31, (int64_t{1} << 32) - 1, int64_t{1} << 32, int64_t{1} << 40,
      (int64_t{1} << 60) - 1, int64_t{1} << 60, (int64_t{1} << 60) + 1, int64_t{1} << 62,
      kInt64Max, kInt64Max - 511, kInt64Max - (int64_t{1} << 21), kInt64Min, kInt64Min + 1,
      int64_t{0xdead00000000000}, int64_t{85017493504}, int64_t{85017493504} + 1};
  if (one_in(4)) return PyValue::integer(static_cast<int64_t>(rng_()));
  return PyValue::integer(kValues[below(std::size(kValues))]);
}

PyValue TraceMutator::hostile_value() {
  switch (below(10)) {
    case 0: return PyValue::none();
    case 1: return PyValue::boolean(one_in(2));
    case 2: case 3: return interesting_int();
    case 4: {
      const double d[] = {0.0, -0.0, 0.5, 1.0, 1e300, -1e300,
                          std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN()};
      return PyValue::floating(d[below(std::size(d))]);
    }
    case 5: {
      static const char* kStrs[] = {"", "alloc", "free_requested", "segment_alloc", "oom",
                                    "small", "large", "inactive", "active_allocated",
                                    "\xf0\x9f\x98\x80", "segment_map"};
      return PyValue::str(kStrs[below(std::size(kStrs))]);
    }
    case 6: return PyValue::list();
    case 7: return PyValue::dict();
    case 8: return PyValue::tuple({interesting_int()});
    default: return PyValue::list({PyValue::dict()});
  }
}

PyValue* TraceMutator::random_event(PyValue& snap) {
  if (snap.kind() != Kind::kDict) return nullptr;
  PyValue* traces = const_cast<PyValue*>(snap.find("device_traces"));
  if (!traces || traces->kind() != Kind::kList || traces->items().empty()) return nullptr;
  PyValue& dev = traces->items()[below(traces->items().size())];
  if (dev.kind() != Kind::kList || dev.items().empty()) return nullptr;
  return &dev.items()[below(dev.items().size())];
}

void TraceMutator::mutate_event(PyValue& snap) {
  PyValue* e = random_event(snap);
  if (!e || e->kind() != Kind::kDict) return;
  PyValue::Dict& d = e->as_dict();
  if (d.empty()) return;
  static const char* kKeys[] = {"action", "addr", "size", "stream", "time_us", "device_free",
                                "frames"};
  const std::string key = kKeys[below(std::size(kKeys))];
  auto it = std::find_if(d.begin(), d.end(), [&](const auto& kv) {
    return kv.first.kind() == Kind::kStr && kv.first.as_str() == key;
  });
  switch (below(6)) {
    case 0:  // Remove the field.
      if (it != d.end()) d.erase(it);
      return;
    case 1: {  // Another action, known or not.
      static const char* kActions[] = {"segment_alloc", "segment_free", "alloc", "free_requested",
                                       "free_completed", "oom", "snapshot", "user_defined",
                                       "segment_map", "segment_unmap", "free", "ALLOC", ""};
      set_field(*e, "action", PyValue::str(kActions[below(std::size(kActions))]));
      return;
    }
    case 2: {  // An address of another event, maybe shifted: overlaps.
      PyValue* other = random_event(snap);
      const PyValue* addr = other && other->kind() == Kind::kDict ? other->find("addr") : nullptr;
      if (it == d.end() || !addr || addr->kind() != Kind::kInt) return;
      const int64_t shift = one_in(2) ? 0 : static_cast<int64_t>(below(64)) * 512 - 16384 +
                                                static_cast<int64_t>(one_in(4) ? below(512) : 0);
      it->second = PyValue::integer(static_cast<int64_t>(
          static_cast<uint64_t>(addr->as_int()) + static_cast<uint64_t>(shift)));
      return;
    }
    case 3:
      if (it != d.end()) it->second = interesting_int();
      return;
    case 4:  // Streams: many distinct ones, or hostile ones.
      set_field(*e, "stream", one_in(2) ? PyValue::integer(static_cast<int64_t>(below(100000)))
                                 : interesting_int());
      return;
    default:
      if (it != d.end()) it->second = hostile_value();
  }
}

void TraceMutator::mutate_events_list(PyValue& snap) {
  if (snap.kind() != Kind::kDict) return;
  PyValue* traces = const_cast<PyValue*>(snap.find("device_traces"));
  if (!traces || traces->kind() != Kind::kList || traces->items().empty()) return;
  PyValue& dev = traces->items()[below(traces->items().size())];
  if (dev.kind() != Kind::kList) return;
  PyValue::List& ev = dev.items();
  if (ev.empty()) return;
  const size_t a = below(ev.size()), b = below(ev.size());
  switch (below(7)) {
    case 0: ev.erase(ev.begin() + static_cast<std::ptrdiff_t>(a)); break;
    case 1: ev.insert(ev.begin() + static_cast<std::ptrdiff_t>(a), deep_copy(ev[b])); break;
    case 2: std::swap(ev[a], ev[b]); break;
    case 3: std::reverse(ev.begin() + static_cast<std::ptrdiff_t>(std::min(a, b)),
                         ev.begin() + static_cast<std::ptrdiff_t>(std::max(a, b))); break;
    case 4: ev.resize(std::min(a, b)); break;                 // Cut the end.
    case 5: ev.erase(ev.begin(), ev.begin() + static_cast<std::ptrdiff_t>(a)); break;  // Cut the start.
    default: ev.clear();
  }
}

void TraceMutator::mutate_devices(PyValue& snap) {
  if (snap.kind() != Kind::kDict) return;
  PyValue* traces = const_cast<PyValue*>(snap.find("device_traces"));
  if (!traces) return;
  switch (below(5)) {
    case 0: *traces = PyValue::list(); break;
    case 1: *traces = hostile_value(); break;
    case 2: {  // Many devices: empty ones, then a copy of the trace.
      if (traces->kind() != Kind::kList) return;
      PyValue::List devs;
      for (size_t i = 0, n = below(64); i < n; ++i) devs.push_back(PyValue::list());
      for (const PyValue& d : traces->items()) devs.push_back(deep_copy(d));
      *traces = PyValue::list(std::move(devs));
      break;
    }
    case 3: {  // The same trace on several devices.
      if (traces->kind() != Kind::kList || traces->items().empty()) return;
      const PyValue first = traces->items()[0];
      for (size_t i = 0, n = 1 + below(4); i < n; ++i) traces->append(deep_copy(first));
      break;
    }
    default:
      if (traces->kind() == Kind::kList && !traces->items().empty())
        traces->items()[below(traces->items().size())] = hostile_value();
  }
}

void TraceMutator::mutate_segments(PyValue& snap) {
  if (snap.kind() != Kind::kDict) return;
  PyValue* segs = const_cast<PyValue*>(snap.find("segments"));
  if (!segs) return;
  if (segs->kind() != Kind::kList || segs->items().empty() || one_in(10)) {
    *segs = one_in(2) ? PyValue::list() : hostile_value();
    return;
  }
  PyValue& s = segs->items()[below(segs->items().size())];
  if (s.kind() != Kind::kDict || one_in(10)) {
    s = hostile_value();
    return;
  }
  static const char* kKeys[] = {"device", "address", "total_size", "segment_type", "blocks"};
  const std::string key = kKeys[below(std::size(kKeys))];
  PyValue* blocks = const_cast<PyValue*>(s.find("blocks"));
  switch (below(5)) {
    case 0: {  // Drop the field.
      PyValue::Dict& d = s.as_dict();
      d.erase(std::remove_if(d.begin(), d.end(), [&](const auto& kv) {
                return kv.first.kind() == Kind::kStr && kv.first.as_str() == key;
              }), d.end());
      break;
    }
    case 1:
      if (PyValue* v = const_cast<PyValue*>(s.find(key))) *v = one_in(2) ? interesting_int() : hostile_value();
      break;
    case 2:  // Blocks that do not tile the segment.
      if (blocks && blocks->kind() == Kind::kList && !blocks->items().empty()) {
        PyValue& blk = blocks->items()[below(blocks->items().size())];
        if (blk.kind() == Kind::kDict)
          if (PyValue* size = const_cast<PyValue*>(blk.find("size"))) *size = interesting_int();
        if (one_in(2)) blocks->append(deep_copy(blk));
      }
      break;
    case 3:
      if (blocks && blocks->kind() == Kind::kList && !blocks->items().empty()) {
        PyValue& blk = blocks->items()[below(blocks->items().size())];
        if (blk.kind() == Kind::kDict)
          if (PyValue* st = const_cast<PyValue*>(blk.find("state"))) *st = hostile_value();
      }
      break;
    default:  // A copy of the segment, maybe on another device.
      segs->append(deep_copy(s));
      if (PyValue* dev = const_cast<PyValue*>(segs->items().back().find("device")))
        *dev = PyValue::integer(static_cast<int64_t>(below(4)));
  }
}

void TraceMutator::mutate_settings(PyValue& snap) {
  if (snap.kind() != Kind::kDict) return;
  PyValue* s = const_cast<PyValue*>(snap.find("allocator_settings"));
  if (!s) return;
  if (s->kind() != Kind::kDict || one_in(10)) {
    *s = hostile_value();
    return;
  }
  static const char* kKeys[] = {"PYTORCH_CUDA_ALLOC_CONF", "max_split_size",
                                "garbage_collection_threshold", "expandable_segments",
                                "pinned_num_register_threads", "release_lock_on_cudamalloc",
                                "roundup_power2_divisions"};
  const std::string key = kKeys[below(std::size(kKeys))];
  PyValue* v = const_cast<PyValue*>(s->find(key));
  if (!v) return;
  if (key == "roundup_power2_divisions" && v->kind() == Kind::kDict && !one_in(4)) {
    static const char* kIntervals[] = {"0", "1", "3", "64", "32768", "65536", "", "-1", " 1",
                                       "01", "18446744073709551616", "9999999999999999999",
                                       "9223372036854775808", "1e3"};
    PyValue::Dict& d = v->as_dict();
    if (one_in(2) || d.empty())
      d.emplace_back(one_in(8) ? interesting_int() : PyValue::str(kIntervals[below(std::size(kIntervals))]),
                     one_in(2) ? interesting_int() : PyValue::integer(static_cast<int64_t>(below(70))));
    else
      d[below(d.size())].second = one_in(2) ? interesting_int() : hostile_value();
    return;
  }
  if (key == "garbage_collection_threshold" && one_in(2)) {
    const double d[] = {0.0, -0.0, 0.5, 0.999, 1.0, 1.5, -0.5, 1e-300,
                        std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::infinity()};
    *v = PyValue::floating(d[below(std::size(d))]);
    return;
  }
  *v = one_in(2) ? interesting_int() : hostile_value();
}

void TraceMutator::mutate_any_node(PyValue& snap) {
  // Walk down a random path and replace what is found there.
  PyValue* node = &snap;
  for (int depth = 0; depth < 6; ++depth) {
    PyValue* next = nullptr;
    if (node->kind() == Kind::kDict && !node->as_dict().empty()) {
      auto& kv = node->as_dict()[below(node->as_dict().size())];
      next = &kv.second;
    } else if ((node->kind() == Kind::kList || node->kind() == Kind::kTuple) &&
               !node->items().empty()) {
      next = &node->items()[below(node->items().size())];
    }
    if (!next || one_in(4)) break;
    node = next;
  }
  if (node == &snap && one_in(2)) return;  // Rarely replace the root itself.
  *node = hostile_value();
}

PyValue TraceMutator::mutate_tree(const PyValue& snapshot) {
  PyValue snap = deep_copy(snapshot);
  for (size_t n = 1 + below(4), i = 0; i < n; ++i) {
    switch (below(10)) {
      case 0: case 1: case 2: mutate_event(snap); break;
      case 3: case 4: mutate_events_list(snap); break;
      case 5: mutate_devices(snap); break;
      case 6: mutate_segments(snap); break;
      case 7: mutate_settings(snap); break;
      default: mutate_any_node(snap);
    }
  }
  return snap;
}

}  // namespace cachealloc
