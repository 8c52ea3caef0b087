// Byte counts as people write them, one grammar for every place that takes
// one: the tool's options (--memory-limit, --device-memory,
// --recorded-limit) and CACHEALLOC_PICKLE_MEMORY_LIMIT. It lives in the
// lowest library that reads one (the pickle reader's budget); everything
// above links it.
//
// Accepted: a decimal number, optionally with a fraction and an exponent,
// then optionally (after at most one space) a unit:
//   1073741824   2e8   1.5e9   40GiB   1.5GiB   40GB   512M   4k   100B
// Units (any case) are powers of 1024: K, M, G, T, each alone or with "B"
// or "iB" ("40GB" is 40 GiB, as PyTorch's own messages and
// max_split_size_mb count megabytes). "B" alone is bytes.
// A fraction of a byte rounds down ("1.8GiB" is 1932735283 bytes, as
// PyTorch's limit is floor(fraction x total)); a value past 64 bits is
// refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cachealloc {

// The bytes `text` stands for, or nullopt with `problem` set to why not
// (phrased to follow the text, e.g. "is not a whole number of bytes").
std::optional<uint64_t> parse_byte_size(std::string_view text, std::string& problem);

// What callers say when they refuse a value: the forms accepted.
inline constexpr const char* kByteSizeExamples = "such as 1073741824, 2e8, 1.5GiB or 40GB";

}  // namespace cachealloc
