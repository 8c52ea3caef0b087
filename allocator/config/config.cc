#include "allocator/config/config.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <utility>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/base/printable.h"

namespace cachealloc {
namespace {

constexpr size_t kMiB = 1048576;

// Splits the text into words and the single-character tokens , : [ ]
// (spaces dropped), the same lexing PyTorch applies.
std::vector<std::string> lex(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : text) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(std::move(word)), word.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      word.push_back(c);
    }
  }
  if (!word.empty()) tokens.push_back(std::move(word));
  return tokens;
}

class Parser {
 public:
  // `start`: the values of keys the text does not name. `at_run_time`:
  // the text updates a config in force (backend may not change).
  Parser(std::string_view text, AllocatorConfig start, bool at_run_time)
      : text_(text), tokens_(lex(text)), start_(std::move(start)), at_run_time_(at_run_time) {}

  AllocatorConfig run() {
    AllocatorConfig c = start_;
    c.source = std::string(text_);
    // Native 2.11 reads large_segment_size_mb first, wherever it stands (a
    // later occurrence wins), because the split limits below are checked
    // against it; then max_non_split_rounding starts from it on every parse.
    // Only a word where a key stands counts: the first token, or one after
    // a ',' outside brackets. The same word as a value
    // ("backend:large_segment_size_mb") or inside a list
    // ("roundup_power2_divisions:[large_segment_size_mb:0,>:4]") is not a
    // key, and the main pass below names the option it is wrong for.
    size_t depth = 0;  // brackets open before token k
    for (size_t k = 0; k < tokens_.size(); ++k) {
      const bool key_position = depth == 0 && (k == 0 || tokens_[k - 1] == ",");
      if (tokens_[k] == "[") ++depth;
      else if (tokens_[k] == "]" && depth > 0) --depth;
      if (!key_position || tokens_[k] != "large_segment_size_mb") continue;
      i_ = k + 1;
      const std::string key = tokens_[k];
      expect(":", key);
      size_t mib = unsigned_int(key);
      check(key, config_rules::large_segment_mib(mib));
      mib = std::min(mib, std::numeric_limits<size_t>::max() / kMiB);
      c.large_segment_size = mib * kMiB;
    }
    c.max_non_split_rounding_size = c.large_segment_size;
    i_ = 0;
    while (i_ < tokens_.size()) {
      const std::string key = tokens_[i_++];
      if (is_punctuation(key))  // ":64", "a:1,,b:2": no key where one must stand
        throw ConfigError(printable("allocator config: a key is missing before '" + key +
                                    "' (in '" + std::string(text_) + "')"));
      expect(":", key);
      if (!release_accepts_key(c.release, key)) {
        unrecognized(key);
      } else if (key == "large_segment_size_mb") {
        word(key);  // read and checked above
      } else if (key == "max_split_size_mb") {
        c.max_split_size = split_limit_mib(key, c.large_segment_size);
      } else if (key == "max_non_split_rounding_mb") {
        c.max_non_split_rounding_size = split_limit_mib(key, c.large_segment_size);
      } else if (key == "garbage_collection_threshold") {
        double v = number(key);
        check(key, config_rules::gc_threshold(v));
        c.garbage_collection_threshold = v;
      } else if (key == "roundup_power2_divisions") {
        parse_divisions(c);
      } else if (key == "backend") {
        std::string v = word(key);
        BackendKind kind = BackendKind::kNative;
        if (v == "cudaMallocAsync") kind = BackendKind::kCudaMallocAsync;
        else if (v != "native")
          fail(key, "unknown backend '" + v + "': options are native and cudaMallocAsync");
        // Native refuses this too (RuntimeError), so it is not "unsupported".
        if (at_run_time_ && kind != start_.backend)
          fail(key, "the backend cannot change at run time (in force: " +
                        std::string(start_.backend == BackendKind::kNative ? "native"
                                                                           : "cudaMallocAsync") +
                        ")");
        c.backend = kind;
      } else if (key == "expandable_segments") {
        c.expandable_segments = boolean(key);
      } else if (key == "release_lock_on_cudamalloc" || key == "release_lock_on_hipmalloc") {
        // Native accepts the ROCm spellings on CUDA builds too.
        c.release_lock_on_cudamalloc = boolean(key);
      } else if (key == "pinned_use_cuda_host_register" ||
                 key == "pinned_use_hip_host_register") {
        c.pinned_use_cuda_host_register = boolean(key);
      } else if (key == "pinned_num_register_threads") {
        size_t v = unsigned_int(key);
        check(key, config_rules::register_threads(v));
        c.pinned_num_register_threads = v;
      } else if (key == "pinned_reserve_segment_size_mb") {
        size_t v = unsigned_int(key);
        if (v == 0) fail(key, "must be greater than 0, got " + last_);
        c.pinned_reserve_segment_size_mb = v;
      } else if (key == "pinned_use_background_threads") {
        c.pinned_use_background_threads = boolean(key);
      } else if (key == "graph_capture_record_stream_reuse") {
        c.graph_capture_record_stream_reuse = boolean(key);
      } else if (key == "throw_on_cudamalloc_oom") {
        c.throw_on_cudamalloc_oom = boolean(key);
        if (c.throw_on_cudamalloc_oom)
          unsupported(key, "True is not carried out by cachealloc (a request past the memory "
                           "fraction still frees cached blocks and retries, as in torch 2.11)");
      } else if (key == "pinned_free_catch_all") {
        c.pinned_free_catch_all = boolean(key);
      } else if (key == "pinned_max_round_threshold_mb") {
        c.pinned_max_round_threshold_mb = unsigned_int(key);
      } else if (key == "pinned_max_cached_size_mb") {
        c.pinned_max_cached_size_mb = unsigned_int(key);
      } else if (key == "per_process_memory_fraction") {
        double v = number(key);
        if (!(v >= 0.0 && v <= 1.0)) fail(key, "must be in [0.0, 1.0], got " + last_);
        c.per_process_memory_fraction = v;
      } else {
        unrecognized(key);
      }
      if (i_ < tokens_.size()) expect(",", key);
    }
    return c;
  }

 private:
  // Native's wording (AcceleratorAllocatorConfig::parseArgs, the same in
  // 2.11 through 2.14), then ours naming the release whose keys apply.
  // Every message quotes the text through printable(): a config text from a
  // trace's pickle may hold a NUL, which would cut what() short.
  [[noreturn]] void unrecognized(const std::string& key) {
    throw ConfigError(printable("Unrecognized key '" + key +
                                "' in Accelerator allocator config. (cachealloc: unrecognized "
                                "allocator option for torch " +
                                std::string(torch_release_name(start_.release)) + " in '" +
                                std::string(text_) + "')"));
  }
  [[noreturn]] void fail(const std::string& key, const std::string& why) {
    throw ConfigError(
        printable("allocator option " + key + ": " + why + " (in '" + std::string(text_) + "')"));
  }
  // A valid value cachealloc cannot carry out (UnsupportedConfig).
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) {
    throw UnsupportedConfig(
        printable("allocator option " + key + ": " + why + " (in '" + std::string(text_) + "')"));
  }
  // Fails naming the value as written when a config_rules check refused it.
  void check(const std::string& key, const std::optional<std::string>& problem) {
    if (problem) fail(key, *problem + ", got " + last_);
  }
  void expect(const char* token, const std::string& key) {
    if (i_ >= tokens_.size() || tokens_[i_] != token)
      fail(key, std::string("expected '") + token + "'" +
                    (i_ < tokens_.size() ? " before '" + tokens_[i_] + "'" : " at the end"));
    ++i_;
  }
  static bool is_punctuation(const std::string& token) {
    return token.size() == 1 && std::string_view(",:[]").find(token[0]) != std::string_view::npos;
  }
  std::string word(const std::string& key) {
    if (i_ >= tokens_.size()) fail(key, "missing value");
    last_ = tokens_[i_++];
    if (is_punctuation(last_)) fail(key, "missing value before '" + last_ + "'");
    return last_;
  }
  bool boolean(const std::string& key) {
    std::string v = word(key);
    if (v == "True") return true;
    if (v == "False") return false;
    fail(key, "expected True or False, got '" + v + "'");
  }
  size_t unsigned_int(const std::string& key) {
    std::string v = word(key);
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
      fail(key, "expected a non-negative integer, got '" + v + "'");
    errno = 0;
    unsigned long long n = std::strtoull(v.c_str(), nullptr, 10);
    if (errno == ERANGE) fail(key, "value '" + v + "' is too large");
    return static_cast<size_t>(n);
  }
  double number(const std::string& key) {
    std::string v = word(key);
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(v.c_str(), &end);
    if (end != v.c_str() + v.size() || errno == ERANGE)
      fail(key, "expected a number, got '" + v + "'");
    return d;
  }
  // A limit given in MiB, returned in bytes.
  size_t split_limit_mib(const std::string& key, size_t large_segment_size) {
    size_t mib = unsigned_int(key);
    // Native clamps to the largest representable byte count.
    mib = std::min(mib, std::numeric_limits<size_t>::max() / kMiB);
    check(key, config_rules::split_limit(mib * kMiB, large_segment_size));
    return mib * kMiB;
  }
  size_t division_value(const std::string& key) {
    size_t v = unsigned_int(key);
    check(key, config_rules::divisions(v));
    return v;
  }

  // Either one number for every interval, or a list
  // [MiB:divisions, ..., >:divisions] keyed by power-of-two interval starts.
  void parse_divisions(AllocatorConfig& c) {
    const std::string key = "roundup_power2_divisions";
    auto& table = c.roundup_power2_divisions;
    if (i_ < tokens_.size() && tokens_[i_] == "[") {
      ++i_;
      bool first = true;
      // As native 2.11: '>' fills the intervals after the last named one
      // (after interval 0 when none is named yet).
      size_t last_index = 0;
      while (true) {
        if (i_ >= tokens_.size()) fail(key, "missing ']'");
        if (tokens_[i_] == "]") { ++i_; break; }
        std::string interval = word(key);
        expect(":", key);
        size_t divisions = division_value(key);
        if (interval == ">") {
          // "[256:1,512:2,>:8]" keeps 2 at 512 MiB and puts 8 from 1 GiB up
          // (the recorded fuzz5/fuzz7 allocator_settings show this rule).
          std::fill(table.begin() + last_index + 1, table.end(), divisions);
        } else {
          if (interval.find_first_not_of("0123456789") != std::string::npos)
            fail(key, "interval '" + interval + "' is not a number of MiB");
          size_t mib = std::strtoull(interval.c_str(), nullptr, 10);
          if (!std::has_single_bit(mib))
            fail(key, "interval " + interval + " must be a power of two (MiB)");
          size_t index = std::min<size_t>(std::bit_width(mib) - 1, table.size() - 1);
          if (first) {
            std::fill(table.begin(), table.begin() + index, divisions);
            first = false;
          }
          table[index] = divisions;
          last_index = index;
        }
        if (i_ < tokens_.size() && tokens_[i_] == ",") ++i_;
      }
    } else {
      size_t divisions = division_value(key);
      if (divisions == 0)
        fail(key, "divisions must be a power of two, got 0");
      table.fill(divisions);
    }
  }

  std::string_view text_;
  std::vector<std::string> tokens_;
  const AllocatorConfig start_;
  const bool at_run_time_;
  size_t i_ = 0;
  std::string last_;
};

}  // namespace

namespace config_rules {

std::optional<std::string> split_limit(size_t bytes, size_t large_segment_size) {
  if (bytes < large_segment_size)
    return "too small, must be at least the large segment size, " +
           std::to_string(large_segment_size / kMiB) + " MiB";
  return std::nullopt;
}

std::optional<std::string> large_segment_mib(size_t mib) {
  if (mib <= kLargeSegmentFloorMiB)
    return "must be more than " + std::to_string(kLargeSegmentFloorMiB) + " MiB";
  return std::nullopt;
}

std::optional<std::string> gc_threshold(double fraction) {
  if (!(fraction > 0.0 && fraction < 1.0)) return "must be in (0.0, 1.0)";  // NaN too
  return std::nullopt;
}

std::optional<std::string> divisions(size_t divisions) {
  if (divisions != 0 && !std::has_single_bit(divisions))
    return "divisions must be a power of two or 0";
  return std::nullopt;
}

std::optional<std::string> register_threads(size_t threads) {
  if (!std::has_single_bit(threads) || threads > 128)
    return "must be a power of two no larger than 128";
  return std::nullopt;
}

}  // namespace config_rules

AllocatorConfig AllocatorConfig::parse(std::string_view text, TorchRelease release) {
  AllocatorConfig start;
  start.release = release;
  return Parser(text, std::move(start), /*at_run_time=*/false).run();
}

AllocatorConfig AllocatorConfig::with_settings(std::string_view text) const {
  AllocatorConfig start = *this;
  const AllocatorConfig defaults;
  start.max_split_size = defaults.max_split_size;
  start.roundup_power2_divisions = defaults.roundup_power2_divisions;
  start.garbage_collection_threshold = defaults.garbage_collection_threshold;
  return Parser(text, std::move(start), /*at_run_time=*/true).run();
}

namespace {

// The variable text_from_environment() reads, or nullptr when neither is set.
const char* config_variable() {
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
    if (std::getenv(name)) return name;
  return nullptr;
}

}  // namespace

std::string AllocatorConfig::text_from_environment() {
  const char* name = config_variable();
  return name ? std::getenv(name) : "";
}

AllocatorConfig AllocatorConfig::parse_environment_text(std::string_view text) {
  try {
    return parse(text);
  } catch (const ConfigError& e) {
    const char* name = config_variable();
    throw ConfigError(std::string(name ? name : "PYTORCH_CUDA_ALLOC_CONF") + "='" +
                      printable(text) + "': " + e.what());
  }
}

AllocatorConfig AllocatorConfig::from_environment() {
  return parse_environment_text(text_from_environment());
}

}  // namespace cachealloc
