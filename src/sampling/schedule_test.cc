// Tests for the sampling schedule, on explicit times (no clock, no sleeps).
#include "sampling/schedule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

TEST(ScheduleTest, EverythingDueAtFirstTickThenByInterval) {
  SamplingSchedule schedule({absl::Seconds(1), absl::Seconds(3), absl::Seconds(1)},
                            absl::Seconds(1));
  std::vector<size_t> due;
  schedule.Due(kT0, &due);
  EXPECT_THAT(due, ElementsAre(0, 1, 2));
  std::vector<int> count(3);
  for (int s = 1; s <= 9; ++s) {
    schedule.Due(kT0 + absl::Seconds(s), &due);
    for (size_t i : due) ++count[i];
  }
  EXPECT_THAT(count, ElementsAre(9, 3, 9));
}

TEST(ScheduleTest, JitterDoesNotSkipOrDrift) {
  SamplingSchedule schedule({absl::Seconds(2)}, absl::Seconds(1));
  std::vector<size_t> due;
  schedule.Due(kT0, &due);
  // Ticks arrive up to 300 ms early or late; the 2 s field is still read every other tick.
  const int jitter_ms[] = {300, -300, 250, -200, 100, -300, 0, 300};
  int reads = 0;
  for (int s = 1; s <= 8; ++s) {
    schedule.Due(kT0 + absl::Seconds(s) + absl::Milliseconds(jitter_ms[s - 1]), &due);
    reads += static_cast<int>(due.size());
    EXPECT_EQ(due.size(), s % 2 == 0 ? 1u : 0u) << "tick " << s;
  }
  EXPECT_EQ(reads, 4);
}

TEST(ScheduleTest, IntervalsRoundUpToWholeTicks) {
  SamplingSchedule schedule({absl::Milliseconds(250), absl::Milliseconds(1500)}, absl::Seconds(1));
  EXPECT_EQ(schedule.interval(0), absl::Seconds(1));
  EXPECT_EQ(schedule.interval(1), absl::Seconds(2));
}

TEST(ScheduleTest, AfterAStallReadsOnceAndRestarts) {
  SamplingSchedule schedule({absl::Seconds(5)}, absl::Seconds(1));
  std::vector<size_t> due;
  schedule.Due(kT0, &due);
  schedule.Due(kT0 + absl::Seconds(60), &due);  // the sampling thread stalled for a minute
  EXPECT_THAT(due, ElementsAre(0));
  schedule.Due(kT0 + absl::Seconds(61), &due);
  EXPECT_THAT(due, IsEmpty());
  schedule.Due(kT0 + absl::Seconds(65), &due);
  EXPECT_THAT(due, ElementsAre(0));
}

TEST(ScheduleTest, ClockSteppingBackRestartsInsteadOfStalling) {
  SamplingSchedule schedule({absl::Seconds(1), absl::Seconds(10)}, absl::Seconds(1));
  std::vector<size_t> due;
  schedule.Due(kT0, &due);
  schedule.Due(kT0 - absl::Seconds(30), &due);
  EXPECT_THAT(due, ElementsAre(0, 1));
  schedule.Due(kT0 - absl::Seconds(29), &due);
  EXPECT_THAT(due, ElementsAre(0));
  // A step back within the tolerance changes nothing.
  schedule.Due(kT0 - absl::Seconds(29) - absl::Milliseconds(300), &due);
  EXPECT_THAT(due, IsEmpty());
}

}  // namespace
}  // namespace vigil
