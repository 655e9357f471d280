// The engine's event log: XIDs, injections and their expiry or clearing (with who did them),
// scenario progress. Every event is logged once, kept in a bounded ring of recent events, and
// fanned out to WatchEvents streams in order.
// Thread-safety: every method is thread-safe; events are recorded from the tick thread, gRPC
// threads and the backend's event thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backend/backend.h"
#include "common/fanout.h"
#include "common/principal.h"
#include "health/policy.h"
#include "inject/injection.h"

namespace vigil {

enum class EventKind {
  kXid,
  kInjectionStarted,
  kInjectionExpired,
  kInjectionCleared,
  kScenarioStarted,
  kScenarioStep,
  kScenarioEnded,
  kHealthTransition,
  kHealthCleared,
  kSxid,              // an NVSwitch error (gpu -1; `sxid` says which switch)
  kGpuReset,          // a GPU reset: requested, then done or failed (principal: who asked)
  kMigLayoutChanged,  // a GPU's MIG mode or GPU instances changed while the engine ran
};
std::string_view EventKindName(EventKind kind);

struct EngineEvent {
  uint64_t id = 0;  // set by EventLog::Record: increasing
  absl::Time time;
  uint64_t seq = 0;  // the engine's seq when it happened
  EventKind kind = EventKind::kXid;
  int gpu = -1;  // -1: not about one GPU
  uint32_t xid = 0;
  // kXid: how the engine's policy treats the code (clients show this, not a table of their own),
  // and whether the policy lists it.
  std::optional<XidRule> xid_rule;
  bool xid_known = false;
  bool injected = false;
  std::optional<InjectionRecord> injection;
  std::optional<Principal> principal;
  std::optional<SxidEvent> sxid;  // kSxid
  std::string message;            // one line for people
};

using EventPtr = std::shared_ptr<const EngineEvent>;
using EventListener = Listener<EventPtr>;

class EventLog {
 public:
  static constexpr size_t kRecentCapacity = 1000;

  explicit EventLog(size_t max_listeners) : fanout_(max_listeners) {}

  // Numbers, logs, keeps and publishes the event; returns it as published.
  EventPtr Record(EngineEvent event);
  // Registers `listener` and hands it up to `recent` past events first, with no gap or
  // duplicate between those and the live ones.
  absl::Status Watch(std::shared_ptr<EventListener> listener, size_t recent);
  void Unwatch(const EventListener* listener) { fanout_.Remove(listener); }
  std::vector<EventPtr> Recent(size_t count) const;
  // Ends every stream with `status`.
  void Stop(const absl::Status& status) { fanout_.Stop(status); }

 private:
  Fanout<EventPtr> fanout_;
  // Held while publishing, so listeners see events in id order.
  mutable absl::Mutex mutex_;
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::deque<EventPtr> recent_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil
