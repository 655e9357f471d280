// Tests for duration parsing.
#include "common/duration.h"

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(DurationTest, ParsesUnits) {
  EXPECT_EQ(*ParseDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("0"), absl::ZeroDuration());
}

TEST(DurationTest, RejectsNegativeUnitlessAndInfinite) {
  for (const char* bad : {"", "5", "-1s", "inf", "1x", "s"}) {
    auto parsed = ParseDuration(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("not a duration"), std::string::npos);
  }
}

}  // namespace
}  // namespace vigil
