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
// The remediator's own NoSchedule taint on a node it takes for a reboot while only a GPU of it was
// quarantined (a DeviceTaintRule, no node taint): the whole node leaves service for the reboot.
inline constexpr std::string_view kRemediationTaint = "vigil.dev/remediation";

// The health check's DeviceTaintRules (per-GPU quarantine): their taint's key, and the labels that
// name the node, the GPU and the engine instance (the remediator reads them, and deletes the rules
// of a node that no longer exists).
inline constexpr std::string_view kDeviceTaintKey = "vigil.dev/gpu-fail";
inline constexpr std::string_view kRuleNodeLabel = "vigil.dev/node";
inline constexpr std::string_view kRuleGpuLabel = "vigil.dev/gpu-uuid";
inline constexpr std::string_view kRuleEngineLabel = "vigil.dev/engine-instance";
// NVIDIA's DRA driver for GPUs: the health check's default --dra-driver, and the driver whose
// ResourceSlices tell a drill that the node's GPUs are DRA devices.
inline constexpr std::string_view kNvidiaGpuDriver = "gpu.nvidia.com";

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

// A GPU a DeviceTaintRule of the node's health check takes out of service (per-GPU quarantine):
// the GPU, its DRA device and the rule's name.
struct QuarantinedDevice {
  std::string uuid;
  std::string driver, pool, device;
  std::string rule;
  bool operator==(const QuarantinedDevice&) const = default;
};

struct PublishedFaults {
  std::string engine;  // the engine's instance id
  uint64_t seq = 0;    // of the verdict
  std::vector<PublishedFault> faults;
  // From the kubelet's pod-resources API, when the health check could read it; otherwise the
  // remediator drains every GPU pod of the node for a reset too.
  bool pods_known = false;
  std::vector<GpuPods> gpu_pods;
  // The failing GPUs DeviceTaintRules take out of service; a GPU not listed is covered by the
  // node taint.
  std::vector<QuarantinedDevice> devices;
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
// "GPU 3 (GPU-…), GPU 5 (GPU-…)", for messages.
std::string GpuRefsText(const std::vector<GpuRef>& gpus);

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

// How the eviction of a pod of a drain went.
enum class DrainPodOutcome : uint8_t {
  kPending,  // not tried yet
  kEvicted,  // the API server accepted the eviction
  kGone,     // it was gone already
  kBlocked,  // a PodDisruptionBudget forbade it (tried again)
  kFailed,   // the API server refused otherwise
  kRetry,    // no answer or a server error: tried again
  kDeleted,  // deleted after a PDB held it past --force-after
};
// "pending", "evicted", "gone", "blocked", "failed", "retry", "deleted".
std::string_view DrainPodOutcomeName(DrainPodOutcome outcome);
std::optional<DrainPodOutcome> ParseDrainPodOutcome(std::string_view name);
// The pod no longer holds the GPU: evicted, gone or deleted.
bool IsDrained(DrainPodOutcome outcome);

// A pod of a drain and how its eviction went.
struct DrainPodState {
  std::string id;  // "NAMESPACE/NAME"
  DrainPodOutcome outcome = DrainPodOutcome::kPending;
  int attempts = 0;
};

// What an episode takes out of service.
enum class EpisodeScope : uint8_t {
  kNode,  // the node: the health check's node taint (or a cordon)
  kGpu,   // the failing GPUs: the health check's DeviceTaintRules; the node stays in service
};
std::string_view EpisodeScopeName(EpisodeScope scope);  // "node", "gpu"

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
  EpisodeScope scope = EpisodeScope::kNode;
  // The failing GPUs' devices the health check's rules take out of service (either scope: a
  // reboot of a GPU quarantined alone waits for its rule to be lifted too).
  std::vector<QuarantinedDevice> devices;
  bool node_tainted = false;  // the remediator put kRemediationTaint on (and takes it off)
  std::vector<DrainPodState> drain;
  int drain_rounds = 0;
  absl::Time drain_next;  // when the next eviction round is due
  std::string message;    // the last thing that happened, for people
};
std::string RemediationToJson(const NodeRemediation& state);
absl::StatusOr<NodeRemediation> ParseRemediation(std::string_view json);

}  // namespace vigil
