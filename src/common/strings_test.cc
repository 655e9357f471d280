// Tests for the string helpers.
#include "common/strings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;

TEST(StringsTest, TrimSplitUpper) {
  EXPECT_EQ(Trim("  a b \t\n"), "a b");
  EXPECT_EQ(Trim("   "), "");
  EXPECT_THAT(Split("a,,b", ','), ElementsAre("a", "", "b"));
  EXPECT_THAT(Split("", ','), ElementsAre(""));
  EXPECT_EQ(ToUpper("dcgm_Fi"), "DCGM_FI");
}

TEST(StringsTest, PrintableEscapesEveryByteALineCannotShow) {
  EXPECT_EQ(Printable("key_file: a.pem"), "key_file: a.pem");
  EXPECT_EQ(Printable(std::string("a\nb\x01\x7f\xc3\xa9", 7)), "a\\x0ab\\x01\\x7f\\xc3\\xa9");
  EXPECT_EQ(Printable("abcdef", 3), "abc...");
  EXPECT_EQ(Printable("abc", 3), "abc");
  EXPECT_EQ(Printable(""), "");
}

TEST(StringsTest, ParsesWholeIntegersOnly) {
  EXPECT_EQ(ParseInt64("-12"), -12);
  EXPECT_EQ(ParseUint64("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseUint64("-1"), std::nullopt);
  EXPECT_EQ(ParseInt64("+1"), std::nullopt);
  EXPECT_EQ(ParseInt64("12x"), std::nullopt);
  EXPECT_EQ(ParseInt64(""), std::nullopt);
  EXPECT_EQ(ParseInt64("99999999999999999999"), std::nullopt);
}

}  // namespace
}  // namespace vigil

#include "common/crc32.h"

namespace vigil {
namespace {

TEST(Crc32Test, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(Crc32(""), 0u);
}

}  // namespace
}  // namespace vigil

