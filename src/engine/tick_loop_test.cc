// Tests of the tick loop on a fake clock: the first tick at once, then ticks on the interval's
// boundaries as the clock reaches them, skipped ticks counted after a stall, and a prompt stop.
// Each step waits for the loop to be waiting on the clock before moving time.
#include "engine/tick_loop.h"

#include <functional>

#include "backend/sim_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/eventually.h"

namespace vigil {
namespace {

using testing::Eventually;

class TickLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sim = SimBackend::Create({.gpu_count = 1, .seed = 1});
    ASSERT_TRUE(sim.ok());
    auto engine = Engine::Create({.node_name = "n1", .clock = &clock_}, std::move(*sim));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  uint64_t Seq() const { return engine_->Latest()->seq; }
  // Waits until the loop has run `seq` ticks and waits on the clock again.
  bool AtRest(uint64_t seq) {
    return Eventually([&] { return Seq() == seq && clock_.waiters() == 1; }, absl::Seconds(10),
                      absl::Milliseconds(1));
  }

  // 0.3 s past a boundary of the 1 s interval ("12:00:00.300" below).
  FakeClock clock_{absl::FromUnixMillis(1'800'000'000'300)};
  std::unique_ptr<Engine> engine_;
};

TEST_F(TickLoopTest, TicksAtOnceThenOnTheIntervalsBoundaries) {
  TickLoop loop(engine_.get(), absl::Seconds(1));
  loop.Start();
  ASSERT_TRUE(AtRest(1));  // the first tick at once, at 12:00:00.300
  // The next on the first boundary at least half an interval later: 12:00:01.
  clock_.Advance(absl::Milliseconds(600));  // 12:00:00.900
  ASSERT_TRUE(AtRest(1));
  clock_.Advance(absl::Milliseconds(100));  // 12:00:01.000
  ASSERT_TRUE(AtRest(2));
  EXPECT_EQ(engine_->Latest()->time, absl::FromUnixSeconds(1'800'000'001));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(AtRest(3));
  EXPECT_EQ(engine_->Latest()->time, absl::FromUnixSeconds(1'800'000'002));
  EXPECT_EQ(loop.skipped_ticks(), 0u);
  loop.Stop();
}

TEST_F(TickLoopTest, ALongStallSkipsTicksInsteadOfBunchingThem) {
  TickLoop loop(engine_.get(), absl::Seconds(1));
  loop.Start();
  ASSERT_TRUE(AtRest(1));
  clock_.Advance(absl::Milliseconds(700));  // 12:00:01.000: the second tick
  ASSERT_TRUE(AtRest(2));
  clock_.Advance(absl::Milliseconds(4500));  // 12:00:05.500: boundaries 2, 3, 4 and 5 passed
  ASSERT_TRUE(AtRest(3));                    // one tick, not four
  EXPECT_EQ(loop.skipped_ticks(), 3u);
  EXPECT_EQ(engine_->Latest()->time, absl::FromUnixMillis(1'800'000'005'500));
  clock_.Advance(absl::Milliseconds(500));  // 12:00:06.000: back on the boundaries
  ASSERT_TRUE(AtRest(4));
  EXPECT_EQ(engine_->Latest()->time, absl::FromUnixSeconds(1'800'000'006));
  loop.Stop();
}

TEST_F(TickLoopTest, StopEndsTheWaitWithoutAnotherTick) {
  TickLoop loop(engine_.get(), absl::Seconds(1));
  loop.Start();
  ASSERT_TRUE(AtRest(1));
  loop.Stop();  // returns although the fake clock never reaches the next tick
  EXPECT_EQ(Seq(), 1u);
  EXPECT_EQ(clock_.waiters(), 0);
}

}  // namespace
}  // namespace vigil
