// Implements SamplingSchedule.
#include "sampling/schedule.h"

#include "common/check.h"

namespace vigil {

SamplingSchedule::SamplingSchedule(std::vector<absl::Duration> intervals,
                                   absl::Duration tick_interval)
    : intervals_(std::move(intervals)),
      tolerance_(tick_interval / 2),
      next_due_(intervals_.size(), absl::InfinitePast()) {
  VIGIL_CHECK(tick_interval > absl::ZeroDuration());
  for (absl::Duration& interval : intervals_) {
    const int64_t ticks = std::max<int64_t>(1, absl::Ceil(interval, tick_interval) / tick_interval);
    interval = tick_interval * ticks;
  }
}

void SamplingSchedule::Due(absl::Time now, std::vector<size_t>* due) {
  due->clear();
  for (size_t i = 0; i < intervals_.size(); ++i) {
    // The wall clock stepped back further than an interval (NTP): restart rather than wait.
    const bool clock_went_back = next_due_[i] - intervals_[i] > now + tolerance_;
    if (now + tolerance_ < next_due_[i] && !clock_went_back) continue;
    due->push_back(i);
    const absl::Time next = next_due_[i] + intervals_[i];
    // First tick, or a stall longer than the interval: restart the cadence from now.
    next_due_[i] =
        next_due_[i] == absl::InfinitePast() || next + tolerance_ <= now || clock_went_back
            ? now + intervals_[i]
            : next;
  }
}

}  // namespace vigil
