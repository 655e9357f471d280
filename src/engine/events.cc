// Implements the event log.
#include "engine/events.h"

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

EventPtr EventLog::Record(EngineEvent event) {
  absl::MutexLock lock(&mutex_);
  event.id = next_id_++;
  const auto level = event.kind == EventKind::kXid || event.kind == EventKind::kSxid ||
                             event.kind == EventKind::kHealthTransition
                         ? spdlog::level::warn
                         : spdlog::level::info;
  spdlog::log(level, "event {} {}: {}{}", event.id, EventKindName(event.kind), event.message,
              event.principal ? " (by " + event.principal->description + ")" : "");
  auto published = std::make_shared<const EngineEvent>(std::move(event));
  recent_.push_back(published);
  if (recent_.size() > kRecentCapacity) recent_.pop_front();
  fanout_.Publish(published);
  return published;
}

absl::Status EventLog::Watch(std::shared_ptr<EventListener> listener, size_t recent) {
  absl::MutexLock lock(&mutex_);
  if (absl::Status added = fanout_.Add(listener); !added.ok()) return added;
  const size_t count = std::min(recent, recent_.size());
  for (size_t i = recent_.size() - count; i < recent_.size(); ++i) listener->OnMessage(recent_[i]);
  return absl::OkStatus();
}

std::vector<EventPtr> EventLog::Recent(size_t count) const {
  absl::MutexLock lock(&mutex_);
  const size_t n = std::min(count, recent_.size());
  return {recent_.end() - static_cast<std::ptrdiff_t>(n), recent_.end()};
}

}  // namespace vigil
