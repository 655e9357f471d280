// The engine's event log: XIDs, injections and their expiry or clearing (with who did them),
// scenario progress. Every event is logged once, kept in a bounded ring of recent events, and
// fanned out to WatchEvents streams in order.
// Thread-safety: every method is thread-safe; events are recorded from the tick thread, gRPC
// threads and the backend's event thread. No listener and no log sink is ever called under the
// log's lock: a recording thread numbers and keeps the event under it, and whichever thread finds
// no one publishing becomes the publisher (a combining publisher) and, outside the lock, logs and
// publishes every pending event in id order until none is left.
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

  // Numbers and keeps the event, and sees it logged and published: by this thread, or by the
  // thread publishing already (then it may be published after Record returns, never out of id
  // order). Returns the event as published. May be called from a listener's OnMessage.
  EventPtr Record(EngineEvent event) ABSL_LOCKS_EXCLUDED(mutex_);
  // Registers `listener` and hands it up to `recent` past events first, with no gap or
  // duplicate between those and the live ones: it waits for the publisher to finish what is
  // pending and becomes the publisher itself while it replays, so events recorded meanwhile reach
  // the listener after its replay. Precondition: not called from a listener's OnMessage (it would
  // wait for itself; crashes instead).
  absl::Status Watch(std::shared_ptr<EventListener> listener, size_t recent)
      ABSL_LOCKS_EXCLUDED(mutex_);
  void Unwatch(const EventListener* listener) { fanout_.Remove(listener); }
  std::vector<EventPtr> Recent(size_t count) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends every stream with `status`.
  void Stop(const absl::Status& status) { fanout_.Stop(status); }

 private:
  // Logs and publishes pending events until none is left, then stops being the publisher.
  // Precondition: this thread set publishing_ (in Record or Watch).
  void PublishPending() ABSL_LOCKS_EXCLUDED(mutex_);
  bool NotPublishing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !publishing_; }

  // Published to by one thread at a time: the one that set publishing_.
  Fanout<EventPtr> fanout_;
  // A leaf: never held while logging or calling a listener.
  mutable absl::Mutex mutex_;
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::deque<EventPtr> recent_ ABSL_GUARDED_BY(mutex_);
  // Recorded, in id order, and not yet logged and published.
  std::deque<EventPtr> pending_ ABSL_GUARDED_BY(mutex_);
  // A thread is logging and publishing (outside the lock) what it took from pending_.
  bool publishing_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace vigil
