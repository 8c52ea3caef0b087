#include "pickle/pickle_writer.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cachealloc {

namespace {

// Opcode bytes, as pickletools names them.
constexpr char kProto = '\x80';
constexpr char kStop = '.';
constexpr char kMark = '(';
constexpr char kNone = 'N';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kBinInt = 'J';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kLong1 = '\x8a';
constexpr char kBinFloat = 'G';
constexpr char kShortBinUnicode = '\x8c';
constexpr char kBinUnicode = 'X';
constexpr char kEmptyList = ']';
constexpr char kAppend = 'a';
constexpr char kAppends = 'e';
constexpr char kEmptyDict = '}';
constexpr char kSetItem = 's';
constexpr char kSetItems = 'u';
constexpr char kEmptyTuple = ')';
constexpr char kTuple = 't';
constexpr char kTuple1 = '\x85';
constexpr char kMemoize = '\x94';
constexpr char kBinGet = 'h';
constexpr char kLongBinGet = 'j';

// Python's pickler batches APPENDS/SETITEMS by this many items (pairs for
// dicts) so that the loader's stack stays small; we do the same.
constexpr size_t kBatchItems = 1000;

// Strings at least this long (bytes) are also memoized by address
// (write_str): hashing them again per reference would cost their length.
constexpr size_t kMinBoxMemoBytes = 256;

class Writer {
 public:
  std::string run(const PyValue& root) {
    out_.push_back(kProto);
    out_.push_back(4);
    write_value(root);
    while (!frames_.empty()) step();
    out_.push_back(kStop);
    return std::move(out_);
  }

 private:
  // One container being written. `next` counts child values already emitted;
  // a dict has two child values (key, value) per entry.
  struct Frame {
    const PyValue* value;
    const void* identity;
    size_t n_children;
    size_t next = 0;
    size_t batch_start = 0;  // First child index of the open batch.
    size_t batch_end = 0;    // Child index that closes the open batch.
    bool in_batch = false;
  };

  void put_le(uint64_t v, int n_bytes) {
    char buf[8];
    for (int i = 0; i < n_bytes; ++i) buf[i] = static_cast<char>(v >> (8 * i));
    out_.append(buf, static_cast<size_t>(n_bytes));
  }

  void write_int(int64_t v) {
    if (v >= 0 && v <= 0xff) {
      out_.push_back(kBinInt1);
      put_le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v <= 0xffff) {
      out_.push_back(kBinInt2);
      put_le(static_cast<uint64_t>(v), 2);
    } else if (v >= std::numeric_limits<int32_t>::min() &&
               v <= std::numeric_limits<int32_t>::max()) {
      out_.push_back(kBinInt);
      put_le(static_cast<uint64_t>(v), 4);
    } else {
      // LONG1: minimal little-endian two's complement. Drop a top byte while
      // it only repeats the sign bit of the byte below it.
      const uint64_t bits = static_cast<uint64_t>(v);
      int n = 8;
      while (n > 1) {
        const uint8_t top = static_cast<uint8_t>(bits >> (8 * (n - 1)));
        const bool below_negative = (bits >> (8 * (n - 1) - 1)) & 1;
        if ((top == 0x00 && !below_negative) || (top == 0xff && below_negative)) {
          --n;
        } else {
          break;
        }
      }
      out_.push_back(kLong1);
      out_.push_back(static_cast<char>(n));
      put_le(bits, n);
    }
  }

  void write_float(double d) {
    // BINFLOAT: IEEE 754 double, big-endian.
    const uint64_t bits = std::bit_cast<uint64_t>(d);
    out_.push_back(kBinFloat);
    for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>(bits >> (8 * i)));
  }

  void write_get(uint32_t index) {
    if (index <= 0xff) {
      out_.push_back(kBinGet);
      put_le(index, 1);
    } else {
      out_.push_back(kLongBinGet);
      put_le(index, 4);
    }
  }

  // MEMOIZE stores the stack top at index len(memo); we mirror that count.
  uint32_t memoize() {
    if (memo_count_ == std::numeric_limits<uint32_t>::max()) {
      throw PickleError("pickle: more than 2^32 - 1 memo entries");
    }
    out_.push_back(kMemoize);
    return memo_count_++;
  }

  void write_str(const std::string& s) {
    // A long string is looked up by address first: one the tree references
    // many times (one box shared by many frames) is then found without
    // hashing its text again, so writing costs its length once, not once
    // per reference. Short ones (keys, states: a new box each) are hashed,
    // which costs about what a lookup by address would.
    const bool long_text = s.size() >= kMinBoxMemoBytes;
    if (long_text) {
      if (auto it = str_box_memo_.find(&s); it != str_box_memo_.end()) {
        write_get(it->second);
        return;
      }
    }
    if (auto it = str_memo_.find(s); it != str_memo_.end()) {
      if (long_text) str_box_memo_.emplace(&s, it->second);
      write_get(it->second);
      return;
    }
    if (s.size() <= 0xff) {
      out_.push_back(kShortBinUnicode);
      put_le(s.size(), 1);
    } else if (s.size() <= std::numeric_limits<uint32_t>::max()) {
      out_.push_back(kBinUnicode);
      put_le(s.size(), 4);
    } else {
      throw PickleError("pickle: string of " + std::to_string(s.size()) +
                        " bytes is too long for BINUNICODE (max 4 GiB - 1)");
    }
    out_.append(s);
    const uint32_t index = memoize();
    str_memo_.emplace(s, index);
    if (long_text) str_box_memo_.emplace(&s, index);
  }

  static const void* identity_of(const PyValue& v) {
    return v.kind() == PyValue::Kind::kDict ? static_cast<const void*>(&v.as_dict())
                                            : static_cast<const void*>(&v.items());
  }

  // Writes a scalar or a memo reference in full, or opens a container frame
  // whose children `step` writes later.
  void write_value(const PyValue& v) {
    using Kind = PyValue::Kind;
    switch (v.kind()) {
      case Kind::kNone: out_.push_back(kNone); return;
      case Kind::kBool: out_.push_back(v.as_bool() ? kNewTrue : kNewFalse); return;
      case Kind::kInt: write_int(v.as_int()); return;
      case Kind::kFloat: write_float(v.as_float()); return;
      case Kind::kStr: write_str(v.as_str()); return;
      case Kind::kList:
      case Kind::kTuple:
      case Kind::kDict: break;
    }
    const void* id = identity_of(v);
    // Checked before the memo: a list inside itself would otherwise be
    // written as a reference to a list that is still being filled.
    if (open_.count(id) != 0) {
      throw PickleError(std::string("pickle: cannot write a ") + v.kind_name() +
                        " that contains itself (cycle)");
    }
    if (auto it = container_memo_.find(id); it != container_memo_.end()) {
      write_get(it->second);
      return;
    }
    Frame f{&v, id, 0};
    if (v.kind() == Kind::kDict) {
      out_.push_back(kEmptyDict);
      container_memo_.emplace(id, memoize());
      f.n_children = 2 * v.as_dict().size();
    } else if (v.kind() == Kind::kList) {
      out_.push_back(kEmptyList);
      container_memo_.emplace(id, memoize());
      f.n_children = v.items().size();
    } else {
      f.n_children = v.items().size();
      if (f.n_children == 0) {
        // Python does not memoize the empty tuple (it is a singleton).
        out_.push_back(kEmptyTuple);
        return;
      }
      if (f.n_children > 3) out_.push_back(kMark);
    }
    open_.insert(id);
    frames_.push_back(f);
  }

  // Advances the innermost open container by one action: close a batch,
  // finish the container, open a batch, or write one child.
  void step() {
    Frame& f = frames_.back();
    const PyValue::Kind kind = f.value->kind();
    const bool is_dict = kind == PyValue::Kind::kDict;
    const size_t per_item = is_dict ? 2 : 1;
    if (kind != PyValue::Kind::kTuple) {
      if (f.in_batch && f.next == f.batch_end) {
        const bool single = f.batch_end - f.batch_start == per_item;
        out_.push_back(is_dict ? (single ? kSetItem : kSetItems)
                               : (single ? kAppend : kAppends));
        f.in_batch = false;
        return;
      }
      if (!f.in_batch && f.next < f.n_children) {
        f.batch_start = f.next;
        f.batch_end = std::min(f.next + kBatchItems * per_item, f.n_children);
        f.in_batch = true;
        if (f.batch_end - f.next > per_item) out_.push_back(kMark);
      }
    }
    if (f.next == f.n_children) {
      finish(f);
      return;
    }
    const size_t i = f.next++;
    const PyValue& child =
        is_dict ? (i % 2 == 0 ? f.value->as_dict()[i / 2].first
                              : f.value->as_dict()[i / 2].second)
                : f.value->items()[i];
    write_value(child);  // May push a frame: `f` is not used after this.
  }

  void finish(const Frame& f) {
    if (f.value->kind() == PyValue::Kind::kTuple) {
      out_.push_back(f.n_children <= 3 ? static_cast<char>(kTuple1 + f.n_children - 1)
                                       : kTuple);
      container_memo_.emplace(f.identity, memoize());
    }
    open_.erase(f.identity);
    frames_.pop_back();
  }

  std::string out_;
  std::vector<Frame> frames_;
  uint32_t memo_count_ = 0;
  // Keys view strings inside the tree being written, which outlives Writer.
  std::unordered_map<std::string_view, uint32_t> str_memo_;
  // Strings of kMinBoxMemoBytes or more, by the address of their text (a
  // box the tree shares; see write_str).
  std::unordered_map<const std::string*, uint32_t> str_box_memo_;
  std::unordered_map<const void*, uint32_t> container_memo_;
  std::unordered_set<const void*> open_;  // Containers with frames_ entries.
};

}  // namespace

std::string write_pickle(const PyValue& root) { return Writer().run(root); }

}  // namespace cachealloc
