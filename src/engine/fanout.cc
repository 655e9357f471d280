// Implements Fanout and TickQueue.
#include "engine/fanout.h"

#include <algorithm>

#include "fmt/format.h"

namespace vigil {

absl::Status Fanout::Add(std::shared_ptr<TickListener> listener) {
  absl::MutexLock lock(&mutex_);
  if (stopped_) return absl::FailedPreconditionError("the engine is shutting down");
  if (listeners_.size() >= max_listeners_) {
    return absl::ResourceExhaustedError(
        fmt::format("this engine already serves {} subscriptions, its limit: close idle clients",
                    max_listeners_));
  }
  listeners_.push_back(std::move(listener));
  return absl::OkStatus();
}

void Fanout::Remove(const TickListener* listener) {
  absl::MutexLock lock(&mutex_);
  std::erase_if(listeners_, [&](const auto& l) { return l.get() == listener; });
}

void Fanout::Publish(const std::shared_ptr<const Snapshot>& snapshot) {
  std::vector<std::shared_ptr<TickListener>> listeners;
  {
    absl::MutexLock lock(&mutex_);
    if (stopped_) return;
    listeners = listeners_;
  }
  for (const auto& listener : listeners) listener->OnTick(snapshot);
}

void Fanout::Stop(const absl::Status& status) {
  std::vector<std::shared_ptr<TickListener>> listeners;
  {
    absl::MutexLock lock(&mutex_);
    if (stopped_) return;
    stopped_ = true;
    listeners.swap(listeners_);
  }
  for (const auto& listener : listeners) listener->OnStop(status);
}

size_t Fanout::size() const {
  absl::MutexLock lock(&mutex_);
  return listeners_.size();
}

void TickQueue::Push(std::shared_ptr<const Snapshot> snapshot) {
  if (queue_.size() >= capacity_) {
    queue_.pop_front();
    ++dropped_;
  }
  queue_.push_back(std::move(snapshot));
}

std::shared_ptr<const Snapshot> TickQueue::Pop() {
  if (queue_.empty()) return nullptr;
  auto snapshot = std::move(queue_.front());
  queue_.pop_front();
  return snapshot;
}

}  // namespace vigil
