// Time source for everything in Vigil that reads the time: injected so tests control time.
// Thread-safety: every Clock implementation may be called from any thread.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace vigil {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

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

 private:
  mutable absl::Mutex mutex_;
  absl::Time now_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil
