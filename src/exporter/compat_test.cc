// Tests of the dcgm-exporter release table: the names it takes and the label each release spells.
#include "exporter/compat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(CompatTest, EachReleaseSpellsItsNodeLabel) {
  EXPECT_EQ(HostnameLabelOf(*ParseDcgmExporterRelease("4.8.2")), "Hostname");
  EXPECT_EQ(HostnameLabelOf(*ParseDcgmExporterRelease("4.5.3-4.8.2")), "Hostname");
  EXPECT_EQ(HostnameLabelOf(*ParseDcgmExporterRelease("4.8.3")), "hostname");
  EXPECT_EQ(HostnameLabelOf(*ParseDcgmExporterRelease("4.6.0-4.8.3")), "hostname");
  EXPECT_EQ(HostnameLabelOf(kDefaultDcgmExporterRelease), "Hostname");
}

TEST(CompatTest, AnUnknownReleaseIsOneLineNamingTheChoices) {
  for (const char* bad : {"", "4.8", "4.8.4", "latest", "4.8.2\n"}) {
    auto release = ParseDcgmExporterRelease(bad);
    ASSERT_FALSE(release.ok()) << bad;
    const std::string message(release.status().message());
    EXPECT_THAT(message, ::testing::HasSubstr("use 4.8.2"));
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace vigil
