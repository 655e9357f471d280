// Implements TickLoop.
#include "engine/tick_loop.h"

#include "common/thread.h"
#include "spdlog/spdlog.h"

namespace vigil {

void TickLoop::Start() {
  thread_ = StartNamedThread("vigil-tick", [this] { Run(); });
}

void TickLoop::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TickLoop::Run() {
  engine_->RunTick();  // the first tick at once, so clients have data immediately
  // Then on the boundaries of the interval, starting at least half an interval after the first.
  absl::Time next =
      absl::Ceil(clock_->Now() + interval_ / 2 - absl::UnixEpoch(), interval_) + absl::UnixEpoch();
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      if (clock_->AwaitWithDeadline(&mutex_, absl::Condition(&stopping_), next)) return;
    }
    engine_->RunTick();
    next += interval_;
    const absl::Time now = clock_->Now();
    if (next <= now) {
      // The tick overran one or more intervals (slow backend, stalled host): skip to the next
      // boundary instead of running the missed ticks back to back.
      const int64_t missed = (now - next) / interval_ + 1;
      skipped_ticks_.fetch_add(missed, std::memory_order_relaxed);
      if (now - last_warning_ > absl::Minutes(1)) {  // at most once a minute
        spdlog::warn("sampling fell behind: skipped {} tick(s) of {} ({} in total)", missed,
                     absl::FormatDuration(interval_), skipped_ticks());
        last_warning_ = now;
      }
      next += interval_ * missed;
    }
  }
}

}  // namespace vigil
