// Keeps the node's Kubernetes state in line with the GPU verdict:
// - the node condition `GpuProblem`: True (a GPU on this node FAILs), False (all pass or warn),
//   Unknown (cannot tell), with a reason and a message naming the GPUs and incidents; written
//   with a strategic-merge patch of nodes/NAME/status when its status, reason or identity (the
//   failing GPUs and systems) changes — not for running figures or a new seq — with
//   lastTransitionTime only when the status changes, and re-asserted every `heartbeat`
//   (lastHeartbeatTime; 5 minutes, as the kubelet and node-problem-detector);
// - an Event on every transition of the condition's status;
// - with `taint`, a NoSchedule taint while a GPU FAILs, removed only after the node has been
//   healthy (False, not Unknown) for `untaint_after` — hysteresis against flapping — and never
//   removed when this check did not add it (an annotation on the node records ownership, so a
//   restart of the check keeps it); not added while the tainted-share circuit breaker is open
//   (healthcheck/taint_breaker.h: the remediator's published decision, or the check's own count
//   when none is seen) — against a fleet-wide false alarm (logged once per episode and counted);
// - with faults in the desired state (`--remediation`), the vigil.dev/gpu-faults annotation the
// remediator
//   reads: written when the faults change — in the same request as a taint change due in that
//   pass, else as a merge patch of that one annotation — so one transition is one condition
//   write, one Event and one node write, and no write of the check's tests a version its own
//   earlier write moved.
// The check watches its own Node only (an informer with fieldSelector metadata.name=NODE, as the
// kubelet watches its own): no request or watch of the check grows with the fleet. A pass that
// has nothing to write makes no request; the node is read with a GET only at start and after a
// conflict (when the cached copy is known to be stale).
// Taint changes are JSON patches that first `test` the node's spec as last seen, so a concurrent
// change of the taints (the kubelet, an admin, another controller) makes them fail with 422
// instead of clobbering a list that moved, while writes of metadata or status by others (the
// kubelet's status, the remediator's annotations) do not; the reporter then re-reads the node and
// tries again.
// API errors and conflicts (409, 422, 429, 5xx, no answer) are retried with backoff by the
// reporter's own thread: nothing here blocks the health check's endpoints.
// Threads: its own (`vigil-kube`, after Start()) and the informers' (`vigil-informer`, after
// StartWatching()).
// Thread-safety: Wake(), stats(), node_watch() and breaker() from any thread; ReconcileOnce() from
// one thread at a time (the reporter's own after Start(), or a test's).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "api/node_condition.h"
#include "api/remediation.h"
#include "common/clock.h"
#include "healthcheck/taint_breaker.h"
#include "kube/informer.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil {

struct NodeReporterOptions {
  std::string node_name;
  std::string event_namespace = "default";  // where the kubelet puts Node events too
  bool taint = false;
  std::string taint_key = std::string(kDefaultTaintKey);
  absl::Duration untaint_after = absl::Minutes(5);
  double max_tainted_share = 0.5;
  std::string gpu_node_selector = "nvidia.com/gpu.present=true";
  absl::Duration heartbeat = absl::Minutes(5);
  // The remediator's published circuit breaker (api/circuit_breaker.h).
  std::string breaker_namespace = std::string(kDefaultBreakerNamespace);
  std::string breaker_name = std::string(kBreakerConfigMapName);
};

// Events: a repeat of the same type and reason within this window is a series update; at most
// kEventBurst Event writes per node in it (a flapping GPU must not flood etcd with Events).
inline constexpr absl::Duration kEventSeriesWindow = absl::Minutes(10);
inline constexpr size_t kEventBurst = 20;
// The annotation that marks a taint as added by the health check (value: the taint key).
inline constexpr std::string_view kTaintOwnerAnnotation = "vigil.dev/taint-owner";

// The condition the node should carry.
struct DesiredCondition {
  std::string status = "Unknown";  // "True", "False", "Unknown"
  std::string reason = "NoVerdict";
  std::string message = "the health check has no verdict from the node's engine yet";
  // What makes a change worth a write besides status and reason: the GPUs, systems and incident
  // codes behind the condition. The message's running figures and the engine's seq are not part
  // of it: they change every tick and are served by /status and /metrics; the node gets them
  // with the next write or heartbeat.
  std::string identity;
  // With status True: whether the failure may drive automatic actions (the taint). False when
  // every failing incident was injected by a drill that did not allow actions: the chain is then
  // proven up to the decision, and the action only reported (kNoActionForDrill, api/).
  bool actionable = true;
  // With status True: whether the node itself must leave service (the taint). False when every
  // failure is a GPU's that a DeviceTaintRule takes out of service alone
  // (healthcheck/device_quarantine.h); for the taint's hysteresis the node then counts as healthy.
  bool node_taint = true;
};

// What one verdict asks of the node.
struct DesiredNodeState {
  // nullopt: leave the node as it is (e.g. a health check that just started and has no verdict
  // yet must not overwrite what the node says).
  std::optional<DesiredCondition> condition;
  // The node's FAIL incidents (remediation's hand-off, `--remediation` only); nullopt: no fresh
  // verdict, or no --remediation: leave the annotation as it is.
  std::optional<PublishedFaults> faults;
};

struct NodeReporterStats {
  std::atomic<uint64_t> condition_updates{0};
  std::atomic<uint64_t> events{0};             // Event writes: new objects and series updates
  std::atomic<uint64_t> events_suppressed{0};  // over the per-node burst cap
  std::atomic<uint64_t> api_errors{0};
  std::atomic<uint64_t> conflicts{0};
  std::atomic<uint64_t> taints_added{0};
  std::atomic<uint64_t> taints_removed{0};
  std::atomic<uint64_t> taint_refusals{0};
  // Taints not added because the failure is a drill's without --allow-actions (once per drill).
  std::atomic<uint64_t> taints_withheld{0};
  std::atomic<uint64_t> faults_published{0};  // writes of the gpu-faults annotation
  std::atomic<bool> tainted{false};           // the node carries the taint (ours or not)
};

class NodeReporter {
 public:
  // What the node should carry at `now`, from one verdict: the condition and the faults are read
  // together so that a verdict arriving between two reads cannot make a pass publish its faults
  // beside the previous verdict's condition (they would then go as two node writes). Called on
  // the reconciling thread; must not block.
  using DesiredSource = std::function<DesiredNodeState(absl::Time now)>;

  // `api` and `clock` are not owned and must outlive the reporter.
  NodeReporter(NodeReporterOptions options, kube::KubeApi* api, Clock* clock,
               DesiredSource desired);
  ~NodeReporter();

  // The desired condition may have changed: reconcile soon (wakes the reporter's thread).
  void Wake();
  // Starts the informer only (tests that drive ReconcileOnce() themselves).
  void StartWatching();
  // Starts the informer and the reconciling thread.
  void Start();
  void Stop();
  // One pass: read the node if needed, then bring condition, events and taint in line. An error
  // leaves what is not done for the next pass.
  absl::Status ReconcileOnce();
  const NodeReporterStats& stats() const { return stats_; }
  const NodeReporterOptions& options() const { return options_; }
  // This node's object as the reporter watches it (reduced to what it reads).
  const kube::Informer& node_watch() const { return node_; }
  const TaintBreaker& breaker() const { return breaker_; }

  // What the informer keeps of the Node: name, uid, resourceVersion, the ownership annotation
  // (and whether there are annotations at all, which a JSON patch must know), remediation's
  // hand-off annotations (for the relay and the faults), the spec (the taint patches test it
  // whole; a JSON patch addresses taints by index) and the GpuProblem condition.
  static nlohmann::json KeepWhatTheReporterReads(const nlohmann::json& node);

 private:
  // A transition whose Event is not posted yet, and the Event's name once first tried (kept
  // across retries, so a retry after a lost answer meets its own object).
  struct PendingEvent {
    DesiredCondition condition;
    std::string name;
  };

  void Loop();
  absl::Status ReadNode();
  // Takes resourceVersion, condition, taint and ownership from a Node object.
  void LearnNode(const nlohmann::json& node);
  // `changed`: what the condition says changed (else a heartbeat); logged when it did.
  absl::Status PatchCondition(const DesiredCondition& desired, bool changed, absl::Time now);
  absl::Status PostEvent(PendingEvent& pending, absl::Time now);
  // `faults`: the faults annotation's new value ("" removes it) when it is due too; a taint
  // patch sent in this pass carries it, and then it is reset.
  absl::Status ReconcileTaint(const DesiredCondition& desired, absl::Time now,
                              std::optional<std::string>* faults);
  absl::Status AddTaint(absl::Time now, std::optional<std::string>* faults);
  absl::Status RemoveTaint(std::optional<std::string>* faults);
  // Sends the JSON patch `ops` of a taint change, with the faults' ops when they are due (then
  // reset, and counted), and learns the node it answers.
  absl::Status PatchTaint(nlohmann::json ops, std::optional<std::string>* faults,
                          const std::string& what);
  // The ops that set (or remove, for "") the faults annotation, appended to a JSON patch.
  void AddFaultsOps(const std::string& faults, nlohmann::json* ops) const;
  // The faults annotation alone, as a merge patch.
  absl::Status PatchFaults(const std::string& faults);
  // Whether the circuit breaker lets this node be tainted now.
  absl::StatusOr<bool> TaintAllowed();
  // A 2xx answer's body as JSON; anything else an error that says what failed (a 409/422
  // conflict also forgets the node, so the next pass re-reads it).
  absl::StatusOr<nlohmann::json> Check(const absl::StatusOr<kube::KubeResponse>& response,
                                       std::string_view what);

  const NodeReporterOptions options_;
  kube::KubeApi* const api_;
  Clock* const clock_;
  const DesiredSource desired_;
  NodeReporterStats stats_;
  kube::Informer node_;
  TaintBreaker breaker_;
  std::thread thread_;

  absl::Mutex mutex_;
  bool dirty_ ABSL_GUARDED_BY(mutex_) = true;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;

  // Owned by the reconciling thread: what the node looked like when last read or written.
  bool node_known_ = false;
  std::string resource_version_, uid_;
  std::optional<DesiredCondition> on_node_;  // our condition as the node carries it (no identity)
  std::string written_identity_;  // the identity of the condition this process last wrote
  std::optional<PendingEvent> pending_event_;  // see PendingEvent
  absl::Time condition_written_ = absl::InfinitePast();
  bool has_taint_ = false, owns_taint_ = false, has_annotations_ = false, has_taints_ = false;
  int taint_index_ = -1;
  nlohmann::json spec_;  // the node's spec as last seen (what a taint patch tests)
  // The identity (FaultsIdentity) of the faults annotation the node carries; "?" unreadable.
  std::string faults_on_node_;
  absl::Time healthy_since_ = absl::InfinitePast();
  bool refusing_ = false;     // log a circuit-breaker refusal once per episode
  bool withholding_ = false;  // log and count a drill's withheld taint once per drill
  // The API server's Retry-After of the last failed pass (429); the loop waits at least this.
  absl::Duration retry_after_ = absl::ZeroDuration();
  uint64_t events_posted_ = 0;  // makes Event names unique within the process
  // Events posted recently, by type and reason: a repeat within kEventSeriesWindow updates the
  // object (count, lastTimestamp, message) instead of creating another, as the kubelet's event
  // correlator does.
  struct PostedEvent {
    std::string name;
    int64_t count = 1;
    absl::Time last;
  };
  std::map<std::string, PostedEvent> recent_events_;
  std::deque<absl::Time> event_writes_;  // within the burst window
  bool suppressing_ = false;             // log a burst-cap refusal once per episode
};

}  // namespace vigil
