// Fuzz target: the PYTORCH_CUDA_ALLOC_CONF parser (allocator/config/config.h)
// and the line the advisor writes back from a config (lab/conf_line.h).
//
// The input is one config text; the first byte picks the torch release
// whose keys apply and whether the text is also applied as a run-time
// settings call on top of a parsed start-up config.
// Properties beyond "refused with a ConfigError, naming the option, or
// parsed" (fuzz_input.h):
//   - a ConfigError's message names an option ("allocator option KEY: ...")
//     that stands as a key in the text (the first word, or one after a ','
//     outside brackets), or says a key is unrecognized or missing;
//   - conf_line(c) parses back (same release) to a config that steers
//     memory exactly as c: the same expandable_segments, large segment
//     size, split limits, divisions table and garbage collection threshold.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/base/printable.h"
#include "allocator/config/config.h"
#include "lab/conf_line.h"
#include "tests/fuzz/fuzz_input.h"

using namespace cachealloc;

namespace {

constexpr TorchRelease kReleases[] = {TorchRelease::k2_11, TorchRelease::k2_12,
                                      TorchRelease::k2_13, TorchRelease::k2_14};

bool same_steering(const AllocatorConfig& a, const AllocatorConfig& b) {
  return a.expandable_segments == b.expandable_segments &&
         a.large_segment_size == b.large_segment_size && a.max_split_size == b.max_split_size &&
         (a.max_split_size == AllocatorConfig::kUnlimitedSplit ||
          a.max_non_split_rounding_size == b.max_non_split_rounding_size) &&
         a.roundup_power2_divisions == b.roundup_power2_divisions &&
         a.garbage_collection_threshold == b.garbage_collection_threshold;
}

void check_round_trip(const AllocatorConfig& c) {
  const std::string line = conf_line(c);
  AllocatorConfig back;
  try {
    back = AllocatorConfig::parse(line, c.release);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_config: conf_line '%s' of '%s' is refused: %s\n", line.c_str(),
                 c.source.c_str(), e.what());
    std::abort();
  }
  if (!same_steering(c, back)) {
    std::fprintf(stderr, "fuzz_config: conf_line '%s' of '%s' steers differently\n",
                 line.c_str(), c.source.c_str());
    std::abort();
  }
}

// The words that stand where a key does: the first, and each after a ','
// outside brackets (the parser's lexing: , : [ ] are tokens, spaces go).
std::vector<std::string> key_words(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : text) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(word), word.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      word.push_back(c);
    }
  }
  if (!word.empty()) tokens.push_back(word);
  std::vector<std::string> keys;
  size_t depth = 0;
  for (size_t k = 0; k < tokens.size(); ++k) {
    // As the error message shows it (printable(): control bytes escaped).
    if (depth == 0 && (k == 0 || tokens[k - 1] == ",")) keys.push_back(printable(tokens[k]));
    if (tokens[k] == "[") ++depth;
    else if (tokens[k] == "]" && depth > 0) --depth;
  }
  return keys;
}

// Parses `text` by `parse`; returns whether it was accepted.
template <typename Parse>
bool try_parse(std::string_view text, Parse parse) {
  try {
    check_round_trip(parse(text));
    return true;
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    if (m.rfind("Unrecognized key '", 0) == 0 ||
        m.rfind("allocator config: a key is missing before '", 0) == 0)
      return false;
    const std::string prefix = "allocator option ";
    const size_t colon = m.find(':', prefix.size());
    if (m.rfind(prefix, 0) != 0 || colon == std::string::npos) {
      std::fprintf(stderr, "fuzz_config: a ConfigError names no option: %s\n", m.c_str());
      std::abort();
    }
    const std::string named = m.substr(prefix.size(), colon - prefix.size());
    const std::vector<std::string> keys = key_words(text);
    if (std::find(keys.begin(), keys.end(), named) == keys.end()) {
      std::fprintf(stderr, "fuzz_config: the error names '%s', not a key of the text: %s\n",
                   named.c_str(), m.c_str());
      std::abort();
    }
    return false;
  } catch (const std::exception& e) {
    fuzz::undocumented(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const TorchRelease release = kReleases[data[0] % std::size(kReleases)];
  const bool as_settings = data[0] & 0x80;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try_parse(text, [release](std::string_view t) { return AllocatorConfig::parse(t, release); });
  if (as_settings) {
    // Applied at run time over a start-up config that sets every steering key.
    const AllocatorConfig start = AllocatorConfig::parse(
        "expandable_segments:True,large_segment_size_mb:64,max_split_size_mb:256,"
        "roundup_power2_divisions:[64:8,>:2],garbage_collection_threshold:0.5",
        release);
    try_parse(text, [&start](std::string_view t) { return start.with_settings(t); });
  }
  return 0;
}
