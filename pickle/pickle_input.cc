#include "pickle/pickle_input.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "pickle/py_value.h"

namespace cachealloc {
namespace {

// Raw bytes read per fread, and inflated bytes handed out per chunk.
constexpr size_t kReadChunk = size_t{1} << 16;
constexpr size_t kInflateChunk = size_t{1} << 18;

using FilePtr = std::unique_ptr<FILE, int (*)(FILE*)>;

class MemoryInput final : public PickleInput {
 public:
  explicit MemoryInput(std::string_view bytes) : bytes_(bytes) {}
  std::string_view next() override { return std::exchange(bytes_, std::string_view()); }
  std::optional<uint64_t> total() const override { return total_; }

 private:
  std::string_view bytes_;
  uint64_t total_ = bytes_.size();
};

// Reads `f` into `buf`, after the `kept` bytes already at its front, until
// `buf` holds at least `want` bytes or the file ends. Returns the bytes now
// in `buf`; sets `eof` at the end of the file.
size_t fill_from(FILE* f, const std::string& path, std::vector<unsigned char>& buf, size_t kept,
                 size_t want, bool& eof) {
  while (kept < want && !eof) {
    const size_t n = std::fread(buf.data() + kept, 1, buf.size() - kept, f);
    if (n == 0) {
      if (std::ferror(f)) throw PickleError("pickle: cannot read '" + path + "': " + std::strerror(errno));
      eof = true;
    }
    kept += n;
  }
  return kept;
}

class PlainFileInput final : public PickleInput {
 public:
  PlainFileInput(FilePtr f, std::string path, std::vector<unsigned char> first, size_t first_size)
      : f_(std::move(f)), path_(std::move(path)), buf_(std::move(first)), pending_(first_size) {}

  std::string_view next() override {
    size_t n = std::exchange(pending_, 0);
    if (n == 0) n = fill_from(f_.get(), path_, buf_, 0, 1, eof_);
    return {reinterpret_cast<const char*>(buf_.data()), n};
  }

 private:
  FilePtr f_;
  std::string path_;
  std::vector<unsigned char> buf_;
  size_t pending_;  // bytes of buf_ read while sniffing the magic, not yet handed out
  bool eof_ = false;
};

bool gzip_magic_at(const unsigned char* p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

class GzipFileInput final : public PickleInput {
 public:
  GzipFileInput(FilePtr f, std::string path, std::vector<unsigned char> first, size_t first_size)
      : f_(std::move(f)), path_(std::move(path)), raw_(std::move(first)), out_(kInflateChunk) {
    const int ret = inflateInit2(&zs_, 16 + MAX_WBITS);  // 16: gzip wrapper, not zlib
    if (ret == Z_MEM_ERROR) throw PickleError("pickle: out of memory starting to gunzip '" + path_ + "'");
    if (ret != Z_OK) throw corrupt("inflateInit2 failed");
    zs_.next_in = raw_.data();
    zs_.avail_in = static_cast<uInt>(first_size);
  }
  ~GzipFileInput() override { inflateEnd(&zs_); }
  GzipFileInput(const GzipFileInput&) = delete;
  GzipFileInput& operator=(const GzipFileInput&) = delete;

  std::string_view next() override {
    while (!done_) {
      refill(1);
      zs_.next_out = out_.data();
      zs_.avail_out = static_cast<uInt>(out_.size());
      const int ret = inflate(&zs_, Z_NO_FLUSH);
      if (ret == Z_MEM_ERROR) throw PickleError("pickle: out of memory gunzipping '" + path_ + "'");
      if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_STREAM_ERROR)
        throw corrupt(zs_.msg != nullptr ? zs_.msg : "inflate error " + std::to_string(ret));
      const size_t produced = out_.size() - zs_.avail_out;
      if (ret == Z_STREAM_END) {
        // Another gzip member may follow; anything else is garbage.
        refill(2);
        if (zs_.avail_in == 0) done_ = true;
        else if (!gzip_magic_at(zs_.next_in, zs_.avail_in)) throw corrupt("trailing bytes after gzip data");
        else inflateReset(&zs_);
      } else if (produced == 0 && zs_.avail_in == 0 && eof_) {
        throw corrupt("truncated gzip data");
      }
      if (produced == 0) continue;
      inflated_ += produced;
      if (inflated_ > kMaxDecompressedPickleBytes)
        throw PickleError("pickle: '" + path_ + "' decompresses to more than " +
                          std::to_string(kMaxDecompressedPickleBytes) + " bytes");
      return {reinterpret_cast<const char*>(out_.data()), produced};
    }
    return {};
  }

 private:
  PickleError corrupt(const std::string& why) const {
    return PickleError("pickle: corrupt gzip data in '" + path_ + "': " + why);
  }

  // Makes at least `want` raw bytes available to zlib (fewer only at the
  // end of the file), keeping the ones it has not consumed yet.
  void refill(size_t want) {
    if (zs_.avail_in >= want || eof_) return;
    const size_t kept = zs_.avail_in;
    std::memmove(raw_.data(), zs_.next_in, kept);
    zs_.next_in = raw_.data();
    zs_.avail_in = static_cast<uInt>(fill_from(f_.get(), path_, raw_, kept, want, eof_));
  }

  FilePtr f_;
  std::string path_;
  std::vector<unsigned char> raw_;  // kReadChunk bytes of compressed input
  std::vector<unsigned char> out_;  // the chunk next() hands out
  z_stream zs_{};
  bool eof_ = false;   // the file has no more bytes
  bool done_ = false;  // the last gzip member has ended
  uint64_t inflated_ = 0;
};

}  // namespace

std::unique_ptr<PickleInput> pickle_input_from_memory(std::string_view bytes) {
  auto in = std::make_unique<MemoryInput>(bytes);
  in->set_stored_size(bytes.size());
  return in;
}

std::unique_ptr<PickleInput> open_pickle_file(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw PickleError("pickle: cannot open '" + path + "': " + std::strerror(errno));
  std::vector<unsigned char> first(kReadChunk);
  bool eof = false;
  const size_t n = fill_from(f.get(), path, first, 0, 2, eof);
  struct stat st;
  const bool sized = fstat(fileno(f.get()), &st) == 0 && S_ISREG(st.st_mode);
  std::unique_ptr<PickleInput> in;
  if (gzip_magic_at(first.data(), n))
    in = std::make_unique<GzipFileInput>(std::move(f), path, std::move(first), n);
  else
    in = std::make_unique<PlainFileInput>(std::move(f), path, std::move(first), n);
  if (sized) in->set_stored_size(static_cast<uint64_t>(st.st_size));
  return in;
}

}  // namespace cachealloc
