// The engine's sampling schedule: which fields are due at each tick. The engine, not its
// clients, decides how often each field is read.
//
// Each field has an interval, rounded up to a whole number of ticks. A field is due at the first
// tick and then whenever its next due time has come; the next due time advances from the previous
// due time (not from when the tick ran), so tick jitter does not make fields drift. Half a tick
// of tolerance keeps a slightly early tick from skipping a field. After a stall longer than an
// interval, the field is due once and its schedule restarts from that tick; likewise when the
// wall clock steps back by more than an interval.
// Not thread-safe: owned by the engine's sampling thread.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/time/time.h"

namespace vigil {

class SamplingSchedule {
 public:
  // intervals[i] is the interval of field i. Precondition: tick_interval > 0.
  SamplingSchedule(std::vector<absl::Duration> intervals, absl::Duration tick_interval);

  // Fills `due` with the indexes of the fields due at `now`, in increasing order.
  void Due(absl::Time now, std::vector<size_t>* due);

  // The interval of field i after rounding to whole ticks.
  absl::Duration interval(size_t i) const { return intervals_[i]; }
  size_t size() const { return intervals_.size(); }

 private:
  std::vector<absl::Duration> intervals_;
  absl::Duration tolerance_;
  std::vector<absl::Time> next_due_;  // InfinitePast() until the first tick
};

}  // namespace vigil
