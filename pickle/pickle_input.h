// Where the pickle reader's bytes come from: a chunk at a time, so that a
// file is read (and gunzipped) as the reader goes and never held whole. The
// reader charges every chunk against its memory budget as it arrives
// (pickle_reader.h), so an input that inflates without end is refused once
// the budget is spent, while memory stays at a chunk or two.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cachealloc {

// Upper bound on a decompressed .pickle.gz, in bytes (4 GiB): bounds the
// time spent on a gzip bomb even under a budget larger than that.
constexpr uint64_t kMaxDecompressedPickleBytes = uint64_t{4} << 30;

class PickleInput {
 public:
  virtual ~PickleInput() = default;
  // The next bytes of the input; empty once it has ended. The view stays
  // valid until the next call. Throws PickleError for a read error or
  // corrupt compressed data, naming the file.
  virtual std::string_view next() = 0;
  // The input's total size in bytes when known before reading (bytes in
  // memory), for exact "N bytes left" messages; nullopt for a stream.
  virtual std::optional<uint64_t> total() const { return std::nullopt; }
  // The input's size as stored, in bytes: a file's size on disk (gzipped or
  // not), or the bytes in memory; nullopt when unknown (a pipe). The
  // reader's cap on one value is tied to it (pickle_reader.h).
  std::optional<uint64_t> stored_size() const { return stored_size_; }
  void set_stored_size(uint64_t bytes) { stored_size_ = bytes; }

 private:
  std::optional<uint64_t> stored_size_;
};

// Bytes already in memory, handed over as one chunk. `bytes` must outlive
// the input.
std::unique_ptr<PickleInput> pickle_input_from_memory(std::string_view bytes);

// `path`, gunzipped on the fly when it starts with the gzip magic 1f 8b
// (whatever its name; concatenated gzip members are one stream). Throws
// PickleError when the file cannot be opened or read, when its gzip data
// are corrupt, truncated or followed by other bytes, and when they inflate
// past kMaxDecompressedPickleBytes.
std::unique_ptr<PickleInput> open_pickle_file(const std::string& path);

}  // namespace cachealloc
