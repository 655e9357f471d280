// The remediator's decisions: drives each failing GPU node through quarantine -> drain -> recover
// -> verify (docs/remediation.md has the state machine), from what the cluster says — the GPU
// nodes' GpuProblem condition and the faults their health checks publish (api/remediation.h),
// kept by an informer (LIST then WATCH: it never polls) — and keeps each node's state on the node
// itself (the vigil.dev/remediation annotation), so a replica that takes over resumes every node
// where it was: a drain goes on from the pods left, a reset is never asked for twice.
//
// What it does on the node's behalf: the health check's taint is the quarantine (and, as an
// option, a cordon); the drain evicts through the Eviction API one round per pass (drain.h); a
// GPU reset is asked of the node's health check, which relays it to its engine (the only process
// that touches GPUs); a reboot is requested through the configured mechanism, never done by
// default. Guardrails: --mode (off, dry-run: record every step it would take as Events, logs and
// metrics, and change nothing), at most max_attempts recoveries per node in attempt_window (then
// the node is labelled vigil.dev/needs-inspection=true and kept quarantined with a taint of its
// own), at most max_concurrent nodes in drain or recovery, no new episode while more than
// max_tainted_share of the GPU nodes are tainted (the health check's circuit breaker, seen
// cluster-wide), and a drill's injected fault is handled as a dry run unless the drill allowed
// actions.
//
// Every write to a node is a merge patch that names the resourceVersion it was decided on, so a
// replica acting on a stale view (a leader that lost its Lease) is refused with 409 instead of
// undoing the other's work.
//
// At fleet size: one watch of the GPU nodes, each cut down to what the remediator reads (a few
// hundred bytes: KeepWhatTheRemediatorReads); the watch marks the nodes it changes, and a pass
// reconciles those, the nodes whose step time moves (under remediation, or failing and waiting),
// and those whose oldest attempt leaves the window — never a scan of the fleet. The cluster-wide
// counts (tainted nodes, nodes in drain or recovery) are kept as nodes change. The tainted-share
// breaker decided from them is published for the health checks (breaker_publisher.h), so no
// health check watches the fleet.
//
// Threads: the informer's (`vigil-informer`, after StartWatching()). ReconcileOnce() is called by
// one thread at a time (the command's loop while it holds the Lease, or a test); StatusJson(),
// Metrics() and stats() from any thread.
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "api/node_condition.h"
#include "api/remediation.h"
#include "common/clock.h"
#include "kube/informer.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"
#include "remediator/breaker_publisher.h"
#include "remediator/device_claims.h"

namespace vigil::remediator {

enum class Mode : uint8_t { kOff, kDryRun, kOn };
std::string_view ModeName(Mode mode);  // "off", "dry-run", "on"
std::optional<Mode> ParseMode(std::string_view name);

// How a reboot is asked for. Vigil never reboots a node itself.
enum class RebootVia : uint8_t {
  kNone,      // Events say a reboot is needed; a person reboots it
  kSentinel,  // the node's health check writes the reboot-required file kured watches
  kLabel,     // vigil.dev/reboot-requested=true, for an external repair operator
};
std::string_view RebootViaName(RebootVia via);  // "none", "sentinel", "label"
std::optional<RebootVia> ParseRebootVia(std::string_view name);

// What a failing node needs, from the faults its health check published: the strongest action of
// the faults that may drive one (a drill's fault without --allow-actions may not, unless all of
// them are a drill's: then the episode is a dry run), the GPUs that action is about, and one
// line that says what failed. A pure function (a table test covers it).
struct ActionChoice {
  v1::RecommendedAction action = v1::RECOMMENDED_ACTION_NONE;
  std::vector<GpuRef> gpus;  // the GPUs of the faults that chose the action, each once
  std::string incident;      // "GPU 3 memory DCGM_FR_...; node nvswitch ..."
  bool drill_only = false;   // every fault is a drill's that allows no action
};
ActionChoice ChooseAction(const PublishedFaults& faults);

// What moves a node from one step to the next: each step's function returns one of the arrows
// leaving its step (or none: it stays), and NextStep() is the one table of them
// (docs/remediation.md draws it).
enum class Transition : uint8_t {
  kTakeOn,         // idle -> draining: quarantined, the drain planned
  kEscalate,       // -> escalated: needs a person
  kDrained,        // draining -> recovering
  kDrainTimedOut,  // draining -> drain-stuck
  kHealthyAgain,   // drain-stuck -> idle: PASS held without a recovery
  kRecovered,      // recovering -> verifying: the reset done, or back after the reboot
  kVerified,       // verifying -> idle: PASS held, the quarantine lifted; handed back
  kFailedAttempt,  // verifying -> idle: FAIL again; the episode starts over
  kHandedBack,     // escalated -> idle: a person removed the needs-inspection label
};
std::string_view TransitionName(Transition transition);  // "take-on", ...
// The step `transition` leads to from `from`; nullopt when no arrow leaves `from` with it.
std::optional<RemediationStep> NextStep(RemediationStep from, Transition transition);

struct RemediatorOptions {
  Mode mode = Mode::kDryRun;
  int max_attempts = 2;
  absl::Duration attempt_window = absl::Hours(24);
  int max_concurrent = 1;
  double max_tainted_share = 0.5;
  bool cordon = false;
  bool drain_all_pods = false;  // a reboot's drain evicts every pod not owned by a DaemonSet
  std::vector<std::string> exclude_namespaces;
  // The device plugin's pods (a label selector; empty: off) in `device_plugin_namespace`: after a
  // verified recovery, when the node's allocatable nvidia.com/gpu is below its capacity (the
  // plugin still hides the GPU it marked unhealthy, and never un-marks it), the node's plugin pod
  // is deleted once — its DaemonSet starts it again, and it offers every healthy GPU.
  std::string device_plugin_selector;
  std::string device_plugin_namespace = "gpu-operator";
  absl::Duration drain_timeout = absl::Minutes(10);
  // Delete a pod whose eviction a PodDisruptionBudget still blocks this long after the drain
  // began (shorter than drain_timeout); nullopt: never, the drain stops and reports instead.
  std::optional<absl::Duration> force_after;
  RebootVia reboot_via = RebootVia::kNone;
  // How long a reset or reboot may take to show (its result, the node back to PASS).
  absl::Duration recovery_timeout = absl::Minutes(15);
  // PASS held this long after a recovery before the node is handed back.
  absl::Duration untaint_after = absl::Minutes(5);
  std::string taint_key = std::string(kDefaultTaintKey);  // the health check's
  std::string gpu_node_selector = "nvidia.com/gpu.present=true";
  std::string event_namespace = "default";
  std::string identity = "vigil-remediator";  // this replica, in Events and request ids
  // Where the breaker is published for the health checks (api/circuit_breaker.h).
  std::string breaker_namespace = std::string(kDefaultBreakerNamespace);
  std::string breaker_name = std::string(kBreakerConfigMapName);
  Clock* clock = Clock::Real();
};

struct RemediatorStats {
  std::atomic<uint64_t> passes{0};
  std::atomic<uint64_t> episodes{0};  // nodes taken on
  std::atomic<uint64_t> evictions_evicted{0}, evictions_gone{0}, evictions_blocked{0},
      evictions_failed{0};
  std::atomic<uint64_t> pods_deleted{0};  // --force-after
  std::atomic<uint64_t> resets_requested{0}, reboots_requested{0};
  std::atomic<uint64_t> recoveries{0};       // nodes handed back healthy
  std::atomic<uint64_t> failed_attempts{0};  // a FAIL back after a recovery, a failed reset
  std::atomic<uint64_t> escalations{0};
  std::atomic<uint64_t> dry_run_steps{0};
  std::atomic<uint64_t> api_errors{0};
  std::atomic<uint64_t> conflicts{0};
  std::atomic<uint64_t> events{0};
  std::atomic<bool> breaker_open{false};
  std::atomic<uint64_t> tracked_nodes{0};     // GPU nodes known
  std::atomic<uint64_t> last_pass_nodes{0};   // nodes the last pass reconciled
  std::atomic<uint64_t> nodes_reconciled{0};  // summed over passes
  std::atomic<uint64_t> rules_collected{0};   // DeviceTaintRules of nodes that no longer exist
  std::atomic<uint64_t> device_plugin_restarts{0};
};

class Remediator {
 public:
  // `api` is not owned and must outlive the remediator.
  Remediator(RemediatorOptions options, kube::KubeApi* api);
  ~Remediator();

  // Starts the informer of the GPU nodes (a standby replica keeps it warm, so a take-over acts at
  // once). Idempotent.
  void StartWatching();
  void Stop();
  bool synced() const { return nodes_.synced(); }
  // The resourceVersion of node `name` as the informer has it ("" when none): tests wait for the
  // watch to deliver a change before a pass.
  std::string ResourceVersionOf(const std::string& name) const {
    return nodes_.ResourceVersionOf(name);
  }

  // One pass over every GPU node: each takes its next step if it has one due. An API error on a
  // node leaves it for the next pass and does not stop the others; the first error is returned.
  // No node is begun at or after `act_until` (the active replica's Lease may run out by then):
  // the pass stops there, DeadlineExceeded, and the next one goes on.
  absl::Status ReconcileOnce(absl::Time act_until = absl::InfiniteFuture());
  // This replica has just taken the Lease: what it published before may have been overwritten by
  // the replica that held it since, so the breaker is read again at the next pass. Called on
  // ReconcileOnce()'s thread.
  void StartedLeading() { breaker_.Forget(); }

  // Each node the remediator has a state for, as JSON (for /status and `vigil remediator
  // status`).
  nlohmann::json StatusJson() const;
  // Prometheus text: nodes per step, attempts, evictions by outcome, recoveries, the breaker.
  std::string Metrics() const;
  const RemediatorStats& stats() const { return stats_; }
  const RemediatorOptions& options() const { return options_; }
  const BreakerPublisher& breaker() const { return breaker_; }

  // What the informer keeps of a Node: name, uid, resourceVersion, Vigil's labels and
  // annotations, spec.unschedulable and taints, and the GpuProblem condition.
  static nlohmann::json KeepWhatTheRemediatorReads(const nlohmann::json& node);

 private:
  struct NodeView;
  struct Pass;
  class NodeStep;
  class Episode;

  // What a GPU node counts for, kept as it changes.
  struct Tracked {
    bool tainted = false;  // carries the health check's taint
    bool active = false;   // in drain or recovery
    size_t gpus = 0;       // NodeView::gpus (at least those quarantined)
    size_t out_of_service_gpus = 0;
  };

  // The node as the newer of the informer's copy and this replica's last write; nullopt when it
  // is gone.
  std::optional<nlohmann::json> CurrentNode(const std::string& name);
  // Updates the node's counts and whether it is reconciled every pass (nullopt: forgets it).
  void Track(const std::string& name, const std::optional<nlohmann::json>& node, absl::Time now);
  absl::Status ReconcileNode(const std::string& name, const nlohmann::json& node, Pass& pass);
  // Deletes the DeviceTaintRules health checks left for nodes that no longer exist (a node deleted
  // with a GPU quarantined: no health check will lift its rule). Run when a GPU node leaves the
  // watch, and every kRuleSweepEvery; --mode on only (dry-run logs what it would delete). An
  // error is logged and left for the next sweep.
  void CollectRules(absl::Time now);
  // Posts an Event about the node; a failure is logged and counted, never fatal (the step it
  // tells of stands).
  void PostEvent(const NodeView& view, std::string_view type, std::string_view reason,
                 const std::string& message, absl::Time now);

  const RemediatorOptions options_;
  kube::KubeApi* const api_;
  Clock* const clock_;
  kube::Informer nodes_;
  BreakerPublisher breaker_;
  DeviceClaims claims_;  // ReconcileOnce's thread
  RemediatorStats stats_;
  uint64_t written_ = 0;  // makes request ids and Event names unique (ReconcileOnce's thread)

  // Owned by ReconcileOnce's thread.
  // The node as this replica last wrote it (newer than the informer's copy until the watch
  // delivers it): resourceVersion and object.
  std::map<std::string, nlohmann::json> written_nodes_;
  // Dry-run episodes already recorded (node -> what the episode was about), so each is recorded
  // once, not every pass.
  std::map<std::string, std::string> dry_runs_;
  // Waits already reported (node -> why), to log and post an Event once per wait.
  std::map<std::string, std::string> waits_;
  std::map<std::string, Tracked> tracked_;      // every GPU node
  size_t tainted_ = 0;                          // of them, tainted
  size_t gpus_ = 0, out_of_service_gpus_ = 0;   // their GPUs, and those out of service
  size_t gpus_unknown_ = 0;                     // nodes that do not say how many GPUs they have
  int active_ = 0;                              // of them, in drain or recovery
  std::set<std::string> busy_;                  // reconciled every pass
  std::map<std::string, absl::Time> expiring_;  // idle, reconciled when its oldest attempt expires
  std::map<std::string, nlohmann::json> statuses_;  // /status lines of listed nodes
  std::map<std::string, std::string> steps_of_;     // the step of each node not idle
  std::string breaker_error_;                       // the last publication error, logged once
  bool rule_sweep_due_ = true;                      // a GPU node left, or none made yet
  absl::Time next_rule_sweep_ = absl::InfinitePast();

  // The watch's changes for the next pass (the informer's thread adds, the pass takes).
  absl::Mutex changed_mutex_;
  std::set<std::string> changed_ ABSL_GUARDED_BY(changed_mutex_);

  mutable absl::Mutex status_mutex_;
  nlohmann::json status_ ABSL_GUARDED_BY(status_mutex_) = nlohmann::json::array();
  std::map<std::string, int> steps_ ABSL_GUARDED_BY(status_mutex_);  // nodes per step name
};

}  // namespace vigil::remediator
