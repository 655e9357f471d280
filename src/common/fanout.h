// Delivers each published message (a tick's snapshot, an engine event) to every subscriber
// without letting one slow subscriber hold up the publisher or the others: the publisher only
// hands a shared pointer to each listener, which queues it (BoundedQueue) and writes it out on
// its own time.
//
// Threading: Publish() and Stop() are called by the owner (Publish from one thread at a time;
// Stop once, after the last Publish). Add() and Remove() may be called from any thread.
// Listeners are called without the fan-out's lock held, so a listener may be called once more
// after Remove() returns; it must tolerate that (the shared_ptr keeps it alive).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"

namespace vigil {

template <typename Message>
class Listener {
 public:
  virtual ~Listener() = default;
  // A new message. Called on the publisher's thread: must not block.
  virtual void OnMessage(const Message& message) = 0;
  // The publisher is stopping; end the subscription with `status`. Called at most once, and no
  // OnMessage follows it.
  virtual void OnStop(const absl::Status& status) = 0;
};

template <typename Message>
class Fanout {
 public:
  explicit Fanout(size_t max_listeners) : max_listeners_(max_listeners) {}

  // Registers a listener. FailedPrecondition when stopping, ResourceExhausted when max_listeners
  // are already registered.
  absl::Status Add(std::shared_ptr<Listener<Message>> listener) {
    absl::MutexLock lock(&mutex_);
    if (stopped_) return absl::FailedPreconditionError("the engine is shutting down");
    if (listeners_.size() >= max_listeners_) {
      return absl::ResourceExhaustedError(fmt::format(
          "this engine already serves {} streams of this kind, its limit: close idle clients",
          max_listeners_));
    }
    listeners_.push_back(std::move(listener));
    return absl::OkStatus();
  }

  void Remove(const Listener<Message>* listener) {
    absl::MutexLock lock(&mutex_);
    std::erase_if(listeners_, [&](const auto& l) { return l.get() == listener; });
  }

  void Publish(const Message& message) {
    std::vector<std::shared_ptr<Listener<Message>>> listeners;
    {
      absl::MutexLock lock(&mutex_);
      if (stopped_) return;
      listeners = listeners_;
    }
    for (const auto& listener : listeners) listener->OnMessage(message);
  }

  // Calls OnStop on every listener and refuses new ones.
  void Stop(const absl::Status& status) {
    std::vector<std::shared_ptr<Listener<Message>>> listeners;
    {
      absl::MutexLock lock(&mutex_);
      if (stopped_) return;
      stopped_ = true;
      listeners.swap(listeners_);
    }
    for (const auto& listener : listeners) listener->OnStop(status);
  }

  size_t size() const {
    absl::MutexLock lock(&mutex_);
    return listeners_.size();
  }

 private:
  const size_t max_listeners_;
  mutable absl::Mutex mutex_;
  std::vector<std::shared_ptr<Listener<Message>>> listeners_ ABSL_GUARDED_BY(mutex_);
  bool stopped_ ABSL_GUARDED_BY(mutex_) = false;
};

// One subscriber's bounded queue. When full, Push drops the oldest queued item and counts it.
// Not thread-safe: the subscriber guards it with its own lock.
template <typename Item>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  // Returns false when the queue was full and the oldest item was dropped to make room.
  bool Push(Item item) {
    const bool had_room = queue_.size() < capacity_;
    if (!had_room) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.push_back(std::move(item));
    return had_room;
  }
  // The oldest queued item; precondition: !empty().
  Item Pop() {
    Item item = std::move(queue_.front());
    queue_.pop_front();
    return item;
  }
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  uint64_t dropped() const { return dropped_; }

 private:
  size_t capacity_;
  std::deque<Item> queue_;
  uint64_t dropped_ = 0;
};

}  // namespace vigil
