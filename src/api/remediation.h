// What remediation's parties write on a Kubernetes Node for each other, and how it reads back: the
// node's health check publishes its GPU faults (with the pods that hold each GPU); the remediator
// asks for a GPU reset or a reboot, and the health check answers with the result; the remediator
// keeps its own state of the node (the step it is at, its attempts, the drain's progress) so that
// a replica that takes over resumes where the other was. One place for the annotation keys and
// their JSON, so the writers and readers (health check, remediator, drill) cannot drift apart.
// Values are JSON objects in annotations (a few hundred bytes; an annotation may hold 256 KiB).
// Pure functions and plain structs; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

// Health check -> remediator: the node's FAIL incidents (PublishedFaults).
inline constexpr std::string_view kFaultsAnnotation = "vigil.dev/gpu-faults";
// Remediator -> health check: reset these GPUs through the engine (ActionRequest).
inline constexpr std::string_view kResetRequestAnnotation = "vigil.dev/reset-request";
// Health check -> remediator: how the reset of that request went (ActionResult).
inline constexpr std::string_view kResetResultAnnotation = "vigil.dev/reset-result";
// Remediator -> health check: reboot the node through the configured mechanism (ActionRequest).
inline constexpr std::string_view kRebootRequestAnnotation = "vigil.dev/reboot-request";
inline constexpr std::string_view kRebootResultAnnotation = "vigil.dev/reboot-result";
// The remediator's own state of the node (NodeRemediation).
inline constexpr std::string_view kRemediationAnnotation = "vigil.dev/remediation";
// Set by the remediator when a node needs a person; removing it hands the node back.
inline constexpr std::string_view kNeedsInspectionLabel = "vigil.dev/needs-inspection";
// The remediator's own NoSchedule taint on a node that needs inspection: it stays quarantined
// when the health check's taint goes (the GPU passes again, but it failed too often).
inline constexpr std::string_view kNeedsInspectionTaint = "vigil.dev/needs-inspection";
// With --reboot-via label: the label an external repair operator watches.
inline constexpr std::string_view kRebootRequestedLabel = "vigil.dev/reboot-requested";

// "none", "restart-app", ... (RecommendedActionText); nullopt for anything else.
std::optional<v1::RecommendedAction> RecommendedActionFromText(std::string_view text);

// One FAIL incident as the health check publishes it.
struct PublishedFault {
  int gpu = -1;  // -1: a node-level incident (nvswitch)
  std::string uuid;
  std::string system;
  std::string code;
  std::string message;
  v1::RecommendedAction action = v1::RECOMMENDED_ACTION_NONE;
  bool injected = false;
  bool actions_allowed = false;  // a drill that injected it allows automatic actions
  absl::Time first_seen;
  // Whether automatic actions may follow it: a real fault, or a drill's that allows them.
  bool actionable() const { return !injected || actions_allowed; }
};

// A GPU and the pods the kubelet has given it ("NAMESPACE/NAME").
struct GpuPods {
  std::string uuid;
  std::vector<std::string> pods;
};

struct PublishedFaults {
  std::string engine;  // the engine's instance id
  uint64_t seq = 0;    // of the verdict
  std::vector<PublishedFault> faults;
  // From the kubelet's pod-resources API, when the health check could read it; otherwise the
  // remediator drains every GPU pod of the node for a reset too.
  bool pods_known = false;
  std::vector<GpuPods> gpu_pods;
};
std::string FaultsToJson(const PublishedFaults& faults);
// InvalidArgument naming what is wrong.
absl::StatusOr<PublishedFaults> ParseFaults(std::string_view json);
// What makes a change of the faults worth a write: their JSON without the verdict's seq; ""
// when nothing fails.
std::string FaultsIdentity(PublishedFaults faults);

// A GPU a request names: index and UUID (the engine refuses a reset when they disagree).
struct GpuRef {
  uint32_t index = 0;
  std::string uuid;
  bool operator==(const GpuRef&) const = default;
};

// A reset or reboot request.
struct ActionRequest {
  std::string id;            // unique per request: a result answers one id
  std::vector<GpuRef> gpus;  // reset: the GPUs; reboot: empty
  std::string reason;        // for the audit record and the Event
  absl::Time requested;
};
std::string RequestToJson(const ActionRequest& request);
absl::StatusOr<ActionRequest> ParseRequest(std::string_view json);

enum class ActionOutcome : uint8_t {
  kDone,     // reset done / reboot requested on the node
  kRefused,  // not attempted (the GPU is in use, another reset runs): worth asking again
  kFailed,   // attempted and failed, or cannot be done on this node
};
std::string_view ActionOutcomeName(ActionOutcome outcome);  // "done", "refused", "failed"

struct ActionResult {
  std::string id;  // the request's
  ActionOutcome outcome = ActionOutcome::kFailed;
  std::string message;
  absl::Time finished;
};
std::string ResultToJson(const ActionResult& result);
absl::StatusOr<ActionResult> ParseResult(std::string_view json);

// The remediator's steps for one node (docs/remediation.md has the state machine).
enum class RemediationStep : uint8_t {
  kIdle,        // nothing under way (attempts of the window are kept)
  kDraining,    // quarantined; evicting the pods concerned
  kDrainStuck,  // the drain ran out of time: stopped, reported, node kept quarantined
  kRecovering,  // a reset or reboot is requested; waiting for it
  kVerifying,   // recovered; waiting for PASS to hold for the hysteresis
  kEscalated,   // needs a person: labelled, kept quarantined
};
std::string_view RemediationStepName(RemediationStep step);  // "idle", "draining", ...
std::optional<RemediationStep> ParseRemediationStep(std::string_view name);

// A pod of a drain and how its eviction went.
struct DrainPodState {
  std::string id;       // "NAMESPACE/NAME"
  std::string outcome;  // "pending", "evicted", "gone", "blocked", "failed", "deleted"
  int attempts = 0;
};

struct NodeRemediation {
  RemediationStep step = RemediationStep::kIdle;
  v1::RecommendedAction action = v1::RECOMMENDED_ACTION_NONE;
  std::vector<GpuRef> gpus;    // the failing GPUs the episode is about
  std::string incident;        // one line: what failed
  absl::Time episode_started;  // when the remediator took the node on
  absl::Time step_started;
  std::vector<absl::Time> attempts;  // recoveries within the attempt window, oldest first
  std::string request_id;            // of the reset or reboot request in flight
  bool cordoned = false;             // the remediator cordoned it (and uncordons it)
  std::vector<DrainPodState> drain;
  int drain_rounds = 0;
  absl::Time drain_next;  // when the next eviction round is due
  std::string message;    // the last thing that happened, for people
};
std::string RemediationToJson(const NodeRemediation& state);
absl::StatusOr<NodeRemediation> ParseRemediation(std::string_view json);

}  // namespace vigil
