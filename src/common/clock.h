// Time source for everything in Vigil that reads or waits for the time: injected so tests control
// time, including loops that wait (tick loops, retry backoffs): they wait through
// AwaitWithDeadline, which a FakeClock ends when it is advanced past the deadline.
// Thread-safety: every Clock implementation may be called from any thread.
#pragma once

#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace vigil {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // Like absl::Mutex::AwaitWithDeadline with this clock's time: `mutex` is held on entry and on
  // return; waits until `condition` holds (returns true) or Now() reaches `deadline` (returns
  // the condition's value then). The condition is re-evaluated when `mutex` is released by
  // another thread, as with absl::Mutex.
  virtual bool AwaitWithDeadline(absl::Mutex* mutex, const absl::Condition& condition,
                                 absl::Time deadline) const = 0;
  bool AwaitWithTimeout(absl::Mutex* mutex, const absl::Condition& condition,
                        absl::Duration timeout) const {
    return AwaitWithDeadline(mutex, condition, Now() + timeout);
  }
  // Waits `duration` of this clock's time, for a loop that polls (a FakeClock ends the wait when
  // advanced past it, as with AwaitWithDeadline).
  void SleepFor(absl::Duration duration) const {
    absl::Mutex mutex;
    const bool never = false;
    absl::MutexLock lock(&mutex);
    AwaitWithTimeout(&mutex, absl::Condition(&never), duration);
  }

  // The process-wide wall clock. Never null; lives for the whole process.
  static Clock* Real();
};

// A clock that only moves when told to. For tests.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mutex_);
    return now_;
  }
  void Advance(absl::Duration delta) {
    absl::MutexLock lock(&mutex_);
    now_ += delta;
  }
  void Set(absl::Time now) {
    absl::MutexLock lock(&mutex_);
    now_ = now;
  }

  // Waits (on real time) until the condition holds or Advance()/Set() reach the deadline; the
  // fake time is looked at every millisecond of real time, since the waiter's mutex is not this
  // clock's to signal.
  bool AwaitWithDeadline(absl::Mutex* mutex, const absl::Condition& condition,
                         absl::Time deadline) const override;
  // Threads waiting in AwaitWithDeadline now: a test advances the clock once the loop under test
  // is waiting on it.
  int waiters() const {
    absl::MutexLock lock(&mutex_);
    return waiters_;
  }
  // Waits (on real time, at most `timeout`) until at least `count` threads wait on this clock.
  bool AwaitWaiters(int count, absl::Duration timeout = absl::Seconds(10)) const;
  // The earliest deadline a thread now waits for (InfiniteFuture when none): what a loop under
  // test decided to wait, e.g. a backoff.
  absl::Time EarliestDeadline() const {
    absl::MutexLock lock(&mutex_);
    return deadlines_.empty() ? absl::InfiniteFuture() : *deadlines_.begin();
  }

 private:
  mutable absl::Mutex mutex_;
  absl::Time now_ ABSL_GUARDED_BY(mutex_);
  mutable int waiters_ ABSL_GUARDED_BY(mutex_) = 0;
  mutable std::multiset<absl::Time> deadlines_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil
