// The byte-size grammar the tool's options and CACHEALLOC_PICKLE_MEMORY_LIMIT
// share (pickle/byte_size.h).
#include "pickle/byte_size.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

namespace cachealloc {
namespace {

std::optional<uint64_t> parse(const std::string& text) {
  std::string problem;
  return parse_byte_size(text, problem);
}

std::string problem_of(const std::string& text) {
  std::string problem;
  EXPECT_FALSE(parse_byte_size(text, problem).has_value()) << text;
  return problem;
}

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(ByteSize, PlainBytesAndExponentsAreDecimal) {
  EXPECT_EQ(parse("0"), 0u);
  EXPECT_EQ(parse("1073741824"), kGiB);
  EXPECT_EQ(parse("2e8"), 200000000u);
  EXPECT_EQ(parse("1.5e9"), 1500000000u);
  EXPECT_EQ(parse("2E+3"), 2000u);
  EXPECT_EQ(parse("18446744073709551615"), UINT64_MAX);
}

TEST(ByteSize, UnitsArePowersOf1024InAnyCaseWithOrWithoutB) {
  EXPECT_EQ(parse("40GiB"), 40 * kGiB);
  EXPECT_EQ(parse("40GB"), 40 * kGiB);
  EXPECT_EQ(parse("40G"), 40 * kGiB);
  EXPECT_EQ(parse("40 gib"), 40 * kGiB);
  EXPECT_EQ(parse("4k"), 4096u);
  EXPECT_EQ(parse("512MiB"), 512u << 20);
  EXPECT_EQ(parse("1TiB"), kGiB << 10);
  EXPECT_EQ(parse("100B"), 100u);
}

TEST(ByteSize, FractionsOfAByteRoundDown) {
  EXPECT_EQ(parse("1.5GiB"), 3 * kGiB / 2);
  EXPECT_EQ(parse("1.8GiB"), 1932735283u);  // 1932735283.2
  EXPECT_EQ(parse("0.1KiB"), 102u);
  EXPECT_EQ(parse("1e-3"), 0u);
  EXPECT_EQ(parse("0.000000000000000000000000000000000001"), 0u);
}

TEST(ByteSize, RefusesWhatIsNotAByteCountSayingWhy) {
  EXPECT_EQ(problem_of(""), "is not a byte count");
  EXPECT_EQ(problem_of("abc"), "is not a byte count");
  EXPECT_EQ(problem_of("-5"), "is not a byte count");
  EXPECT_EQ(problem_of(".GiB"), "is not a byte count");
  EXPECT_NE(problem_of("12abc").find("unknown unit"), std::string::npos);
  EXPECT_NE(problem_of("40PB").find("unknown unit"), std::string::npos);
  EXPECT_NE(problem_of("1.5.GiB").find("unknown unit"), std::string::npos);
  EXPECT_NE(problem_of("4  GiB").find("unknown unit"), std::string::npos);  // one space at most
}

TEST(ByteSize, RefusesValuesPast64BitsNeverWraps) {
  EXPECT_EQ(problem_of("18446744073709551616"), "is too large");
  EXPECT_EQ(problem_of("99999999999999999999999"), "is too large");
  EXPECT_EQ(problem_of("16777216TiB"), "is too large");
  EXPECT_EQ(problem_of("1e30"), "is too large");
  EXPECT_EQ(problem_of("1e999999999"), "is too large");
  EXPECT_EQ(problem_of("1234567890123456789012345678901"), "has too many digits");
}

}  // namespace
}  // namespace cachealloc
