// Drives Engine::RunTick() on the engine's clock: one dedicated thread, ticks aligned to
// multiples of the tick interval (so engines on different nodes tick together), late ticks
// skipped rather than bunched up. It waits through the clock, so a test runs it on a FakeClock
// and advances time (or drives RunTick() itself).
// Thread-safety: Start() and Stop() from one owning thread.
#pragma once

#include <atomic>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace vigil {

class TickLoop {
 public:
  // Waits on the engine's clock, the time its ticks are stamped with.
  TickLoop(Engine* engine, absl::Duration interval)
      : engine_(engine), interval_(interval), clock_(engine->clock()) {}
  ~TickLoop() { Stop(); }

  void Start();
  // Returns after the tick in progress (if any) has finished. Idempotent.
  void Stop();

  uint64_t skipped_ticks() const { return skipped_ticks_.load(std::memory_order_relaxed); }

 private:
  void Run();

  Engine* const engine_;
  const absl::Duration interval_;
  Clock* const clock_;
  std::thread thread_;
  absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::atomic<uint64_t> skipped_ticks_{0};
  absl::Time last_warning_ = absl::InfinitePast();  // owned by the loop thread
};

}  // namespace vigil
