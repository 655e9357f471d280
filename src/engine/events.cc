// Implements the event log.
#include "engine/events.h"

#include "common/check.h"
#include "spdlog/spdlog.h"

namespace vigil {

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kXid:
      return "XID";
    case EventKind::kInjectionStarted:
      return "INJECTION_STARTED";
    case EventKind::kInjectionExpired:
      return "INJECTION_EXPIRED";
    case EventKind::kInjectionCleared:
      return "INJECTION_CLEARED";
    case EventKind::kScenarioStarted:
      return "SCENARIO_STARTED";
    case EventKind::kScenarioStep:
      return "SCENARIO_STEP";
    case EventKind::kScenarioEnded:
      return "SCENARIO_ENDED";
    case EventKind::kHealthTransition:
      return "HEALTH_TRANSITION";
    case EventKind::kHealthCleared:
      return "HEALTH_CLEARED";
    case EventKind::kGpuReset:
      return "GPU_RESET";
    case EventKind::kSxid:
      return "SXID";
    case EventKind::kMigLayoutChanged:
      return "MIG_LAYOUT_CHANGED";
  }
  return "UNKNOWN";
}

namespace {

// The event log whose pending events this thread is publishing, to catch a listener that calls
// Watch from OnMessage (it would wait for itself).
thread_local const EventLog* publishing_log = nullptr;

void LogEvent(const EngineEvent& event) {
  const auto level = event.kind == EventKind::kXid || event.kind == EventKind::kSxid ||
                             event.kind == EventKind::kHealthTransition
                         ? spdlog::level::warn
                         : spdlog::level::info;
  spdlog::log(level, "event {} {}: {}{}", event.id, EventKindName(event.kind), event.message,
              event.principal ? " (by " + event.principal->description + ")" : "");
}

}  // namespace

EventPtr EventLog::Record(EngineEvent event) {
  EventPtr published;
  {
    absl::MutexLock lock(&mutex_);
    event.id = next_id_++;
    published = std::make_shared<const EngineEvent>(std::move(event));
    recent_.push_back(published);
    if (recent_.size() > kRecentCapacity) recent_.pop_front();
    pending_.push_back(published);
    if (publishing_) return published;  // the publisher takes it in its next round
    publishing_ = true;
  }
  PublishPending();
  return published;
}

void EventLog::PublishPending() {
  const EventLog* const outer = publishing_log;
  publishing_log = this;
  for (;;) {
    std::deque<EventPtr> batch;
    {
      absl::MutexLock lock(&mutex_);
      if (pending_.empty()) {
        publishing_ = false;
        break;
      }
      batch.swap(pending_);
    }
    for (const EventPtr& event : batch) {
      LogEvent(*event);
      fanout_.Publish(event);
    }
  }
  publishing_log = outer;
}

absl::Status EventLog::Watch(std::shared_ptr<EventListener> listener, size_t recent) {
  VIGIL_CHECK(publishing_log != this);  // a listener's OnMessage called Watch
  std::vector<EventPtr> replay;
  {
    absl::MutexLock lock(&mutex_);
    // Become the publisher: with none, pending_ is empty, so every kept event has been published
    // and every later one waits in pending_ until the listener has its replay.
    mutex_.Await(absl::Condition(this, &EventLog::NotPublishing));
    publishing_ = true;
    const size_t count = std::min(recent, recent_.size());
    replay.assign(recent_.end() - static_cast<std::ptrdiff_t>(count), recent_.end());
  }
  absl::Status added = fanout_.Add(listener);
  if (added.ok()) {
    for (const EventPtr& event : replay) listener->OnMessage(event);
  }
  PublishPending();
  return added;
}

std::vector<EventPtr> EventLog::Recent(size_t count) const {
  absl::MutexLock lock(&mutex_);
  const size_t n = std::min(count, recent_.size());
  return {recent_.end() - static_cast<std::ptrdiff_t>(n), recent_.end()};
}

}  // namespace vigil
