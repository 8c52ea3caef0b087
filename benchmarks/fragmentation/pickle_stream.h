// A forward-only pickle writer (protocol 4 opcodes, no frames) straight
// into a gzip file, for snapshots too long to build as a PyValue tree first.
//
// The caller writes values in pickle's stack order: open a container, write
// its items, close it. Strings are memoized (written once, then fetched),
// as Python does for the repeated keys of a snapshot. The output loads with
// Python's pickle.load and with pickle/pickle_reader.h.
#pragma once

#include <zlib.h>

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace cachealloc {

class PickleStream {
 public:
  // Opens `path` for writing, gzip level 3 (fast; traces compress ~5x).
  // Throws std::runtime_error.
  explicit PickleStream(const std::string& path) : file_(gzopen(path.c_str(), "wb3")) {
    if (!file_) throw std::runtime_error("cannot open " + path + " for writing");
    put(0x80), put(4);  // PROTO 4
  }
  ~PickleStream() {
    if (file_) gzclose(file_);
  }
  PickleStream(const PickleStream&) = delete;
  PickleStream& operator=(const PickleStream&) = delete;

  // STOP, flush and close. Throws std::runtime_error on a write error.
  void finish() {
    put('.');
    flush();
    const int rc = gzclose(file_);
    file_ = nullptr;
    if (rc != Z_OK) throw std::runtime_error("gzip write failed");
  }

  void dict() { put('}'); }   // EMPTY_DICT
  void list() { put(']'); }   // EMPTY_LIST
  void mark() { put('('); }   // MARK
  void set_items() { put('u'); }  // SETITEMS: pairs since the mark into the dict below it
  void set_item() { put('s'); }   // SETITEM: one key, value into the dict below
  void appends() { put('e'); }    // APPENDS: items since the mark into the list below it
  void append() { put('a'); }     // APPEND: one item into the list below
  void none() { put('N'); }
  void boolean(bool v) { put(v ? 0x88 : 0x89); }
  void pair() { put(0x86); }  // TUPLE2 of the two values on top

  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      put('K'), put(static_cast<uint8_t>(v));
    } else if (v >= 0 && v < 65536) {
      put('M'), put(static_cast<uint8_t>(v)), put(static_cast<uint8_t>(v >> 8));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      put('J');
      for (int i = 0; i < 4; ++i) put(static_cast<uint8_t>(static_cast<uint32_t>(v) >> (8 * i)));
    } else {
      put(0x8a), put(8);  // LONG1, 8 bytes little-endian two's complement
      for (int i = 0; i < 8; ++i) put(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
    }
  }

  void floating(double v) {  // BINFLOAT, big-endian
    const auto bits = std::bit_cast<uint64_t>(v);
    put('G');
    for (int i = 7; i >= 0; --i) put(static_cast<uint8_t>(bits >> (8 * i)));
  }

  // A str, written once and fetched from the memo afterwards.
  void string(const std::string& s) {
    if (auto it = memo_.find(s); it != memo_.end()) {
      const uint32_t i = it->second;
      if (i < 256) {
        put('h'), put(static_cast<uint8_t>(i));  // BINGET
      } else {
        put('j');  // LONG_BINGET
        for (int k = 0; k < 4; ++k) put(static_cast<uint8_t>(i >> (8 * k)));
      }
      return;
    }
    if (s.size() < 256) {
      put(0x8c), put(static_cast<uint8_t>(s.size()));  // SHORT_BINUNICODE
    } else {
      put('X');  // BINUNICODE
      for (int k = 0; k < 4; ++k) put(static_cast<uint8_t>(s.size() >> (8 * k)));
    }
    for (char c : s) put(static_cast<uint8_t>(c));
    put(0x94);  // MEMOIZE
    memo_.emplace(s, static_cast<uint32_t>(memo_.size()));
  }

 private:
  void put(uint8_t byte) {
    buffer_[used_++] = static_cast<char>(byte);
    if (used_ == sizeof buffer_) flush();
  }
  void flush() {
    if (used_ > 0 && gzwrite(file_, buffer_, static_cast<unsigned>(used_)) != static_cast<int>(used_))
      throw std::runtime_error("gzip write failed");
    used_ = 0;
  }

  gzFile file_;
  char buffer_[1 << 16];
  size_t used_ = 0;
  std::unordered_map<std::string, uint32_t> memo_;
};

}  // namespace cachealloc
