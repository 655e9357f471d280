// Tests for address parsing and backoff.
#include "client/address.h"
#include "client/backoff.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

TEST(AddressTest, AcceptsUnixAndTcpForms) {
  EXPECT_EQ(ParseEngineAddress("unix:///run/vigil/vigil.sock")->target,
            "unix:/run/vigil/vigil.sock");
  EXPECT_EQ(ParseEngineAddress("unix:/tmp/a.sock")->target, "unix:/tmp/a.sock");
  EXPECT_EQ(ParseEngineAddress("/tmp/a.sock")->target, "unix:/tmp/a.sock");
  EXPECT_TRUE(ParseEngineAddress("/tmp/a.sock")->is_unix);
  EXPECT_EQ(ParseEngineAddress("127.0.0.1:5555")->target, "127.0.0.1:5555");
  EXPECT_FALSE(ParseEngineAddress("127.0.0.1:5555")->is_unix);
  EXPECT_EQ(ParseEngineAddress("[::1]:5555")->target, "[::1]:5555");
  EXPECT_EQ(ParseEngineAddress("vigil-engine.monitoring.svc:5555")->display,
            "vigil-engine.monitoring.svc:5555");
}

TEST(AddressTest, RejectsWithTheAcceptedForms) {
  for (const char* bad : {"", "localhost", "localhost:0", "localhost:99999", "unix:relative.sock",
                          "unix://", "http://x:1", "::1:5555", "host:port"}) {
    auto address = ParseEngineAddress(bad);
    ASSERT_FALSE(address.ok()) << bad;
    EXPECT_THAT(address.status().message(), HasSubstr("use unix:///path/to.sock or HOST:PORT"));
  }
}

TEST(BackoffTest, GrowsToTheCapWithJitterAndResets) {
  Backoff backoff({}, 1);
  absl::Duration previous;
  for (int i = 0; i < 20; ++i) {
    const absl::Duration delay = backoff.Next();
    EXPECT_GE(delay, absl::Milliseconds(80));
    EXPECT_LE(delay, absl::Seconds(6));
    if (i == 0) {
      EXPECT_LE(delay, absl::Milliseconds(120));
    }
    previous = delay;
  }
  EXPECT_GE(previous, absl::Seconds(4));
  backoff.Reset();
  EXPECT_LE(backoff.Next(), absl::Milliseconds(120));
}

}  // namespace
}  // namespace vigil
