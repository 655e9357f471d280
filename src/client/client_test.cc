// Tests for address parsing, backoff, and a subscription's way back: its reopen backoff waits on
// the injected clock, and Cancel() ends a reopen that waits for a missing engine.
#include <thread>

#include "client/address.h"
#include "client/engine_client.h"
#include "common/backoff.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using testing::Eventually;

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
  EXPECT_FALSE(ParseEngineAddress("127.0.0.1:5555")->tls);
  const auto tls = ParseEngineAddress("tls://vigil-engine:5555");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(tls->target, "vigil-engine:5555");
  EXPECT_EQ(tls->display, "tls://vigil-engine:5555");
  EXPECT_TRUE(tls->tls);
  EXPECT_FALSE(tls->is_unix);
}

TEST(AddressTest, RejectsWithTheAcceptedForms) {
  for (const char* bad :
       {"", "localhost", "localhost:0", "localhost:99999", "unix:relative.sock", "unix://",
        "http://x:1", "::1:5555", "host:port", "tls://", "tls://host", "tls://unix:/a.sock"}) {
    auto address = ParseEngineAddress(bad);
    ASSERT_FALSE(address.ok()) << bad;
    EXPECT_THAT(
        address.status().message(),
        HasSubstr("use unix:///path/to.sock, HOST:PORT (e.g. 127.0.0.1:5555) or tls://HOST:PORT"));
  }
}

TEST(ReplayedEventsTest, AReconnectsBacklogIsNotNewButARestartedEnginesIs) {
  auto event = [](const std::string& instance, uint64_t id) {
    v1::Event e;
    e.set_instance_id(instance);
    e.set_id(id);
    return e;
  };
  ReplayedEvents replayed;
  const ReplayedEvents::Seen first = replayed.See(event("a", 1));
  EXPECT_TRUE(first.fresh);
  EXPECT_TRUE(first.new_instance);
  EXPECT_TRUE(replayed.See(event("a", 2)).fresh);
  // Reconnected to the same instance: its backlog again, then a new event.
  EXPECT_FALSE(replayed.See(event("a", 1)).fresh);
  EXPECT_FALSE(replayed.See(event("a", 2)).fresh);
  EXPECT_FALSE(replayed.See(event("a", 2)).new_instance);
  EXPECT_TRUE(replayed.See(event("a", 3)).fresh);
  // The engine restarted: its ids start again, all of them new.
  const ReplayedEvents::Seen restarted = replayed.See(event("b", 1));
  EXPECT_TRUE(restarted.fresh);
  EXPECT_TRUE(restarted.new_instance);
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

TEST(SubscriptionTest, ReopensAfterItsBackoffOnTheClockAndCancelEndsAWaitForTheEngine) {
  testing::TempDir dir;
  FakeClock clock;
  auto client = EngineClient::Create("unix://" + dir.File("absent.sock"), {.clock = &clock});
  ASSERT_TRUE(client.ok()) << client.status();
  auto subscription = (*client)->Subscribe({});
  // The first open reports the missing engine at once.
  const auto first = subscription->Next();
  EXPECT_EQ(first.kind, TickSubscription::Event::kDisconnected);
  EXPECT_THAT(std::string(first.error.message()), HasSubstr("unreachable"));
  TickSubscription::Event::Kind second = TickSubscription::Event::kMessage;
  std::thread reader([&] { second = subscription->Next().kind; });
  // The reopen waits out its backoff on the fake clock, then waits for the engine inside gRPC...
  ASSERT_TRUE(
      Eventually([&] { return clock.waiters() == 1; }, absl::Seconds(10), absl::Milliseconds(1)));
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(
      Eventually([&] { return clock.waiters() == 0; }, absl::Seconds(10), absl::Milliseconds(1)));
  EXPECT_EQ(subscription->reconnects(), 0u);  // never connected: not a reconnect
  // ... until Cancel(), from another thread, ends that wait.
  subscription->Cancel();
  reader.join();
  EXPECT_EQ(second, TickSubscription::Event::kCancelled);
}

}  // namespace
}  // namespace vigil
