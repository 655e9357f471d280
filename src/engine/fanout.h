// Delivers each tick's snapshot to every subscriber without letting one slow subscriber hold up
// the engine or the others: the tick thread only hands a shared pointer to each listener, which
// queues it (TickQueue) and writes it out on its own time.
//
// Threading: Publish() and Stop() are called by the engine (Publish from the tick thread; Stop
// once, after the last Publish). Add() and Remove() may be called from any thread. Listeners are
// called without the fan-out's lock held, so a listener may be called once more after Remove()
// returns; it must tolerate that (the shared_ptr keeps it alive).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/snapshot.h"

namespace vigil {

class TickListener {
 public:
  virtual ~TickListener() = default;
  // A new tick. Called on the tick thread: must not block.
  virtual void OnTick(const std::shared_ptr<const Snapshot>& snapshot) = 0;
  // The engine is stopping; end the subscription with `status`. Called at most once, and no
  // OnTick follows it.
  virtual void OnStop(const absl::Status& status) = 0;
};

class Fanout {
 public:
  explicit Fanout(size_t max_listeners) : max_listeners_(max_listeners) {}

  // Registers a listener. FailedPrecondition when the engine is stopping, ResourceExhausted when
  // max_listeners are already registered.
  absl::Status Add(std::shared_ptr<TickListener> listener);
  void Remove(const TickListener* listener);
  void Publish(const std::shared_ptr<const Snapshot>& snapshot);
  // Calls OnStop on every listener and refuses new ones.
  void Stop(const absl::Status& status);
  size_t size() const;

 private:
  const size_t max_listeners_;
  mutable absl::Mutex mutex_;
  std::vector<std::shared_ptr<TickListener>> listeners_ ABSL_GUARDED_BY(mutex_);
  bool stopped_ ABSL_GUARDED_BY(mutex_) = false;
};

// One subscriber's bounded queue of ticks. When full, Push drops the oldest queued tick and counts
// it: the subscriber always gets the newest state, and since every tick message carries the full
// latest values, a dropped tick loses only an intermediate state (history keeps it).
// Not thread-safe: the subscriber guards it with its own lock.
class TickQueue {
 public:
  explicit TickQueue(size_t capacity) : capacity_(capacity) {}

  void Push(std::shared_ptr<const Snapshot> snapshot);
  // The oldest queued tick, or nullptr when empty.
  std::shared_ptr<const Snapshot> Pop();
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  uint64_t dropped() const { return dropped_; }

 private:
  size_t capacity_;
  std::deque<std::shared_ptr<const Snapshot>> queue_;
  uint64_t dropped_ = 0;
};

}  // namespace vigil
