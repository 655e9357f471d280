// The real wall clock behind Clock::Real() (stateless, so safe from any thread), and the fake
// clock's waits.
#include "common/clock.h"

namespace vigil {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mutex, const absl::Condition& condition,
                         absl::Time deadline) const override {
    return mutex->AwaitWithDeadline(condition, deadline);
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

bool FakeClock::AwaitWithDeadline(absl::Mutex* mutex, const absl::Condition& condition,
                                  absl::Time deadline) const {
  {
    absl::MutexLock lock(&mutex_);
    ++waiters_;
    deadlines_.insert(deadline);
  }
  bool held = condition.Eval();
  while (!held && Now() < deadline) {
    held = mutex->AwaitWithTimeout(condition, absl::Milliseconds(1));
  }
  absl::MutexLock lock(&mutex_);
  --waiters_;
  deadlines_.erase(deadlines_.find(deadline));
  return held;
}

bool FakeClock::AwaitWaiters(int count, absl::Duration timeout) const {
  absl::MutexLock lock(&mutex_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return waiters_ >= count; };
  return mutex_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace vigil
