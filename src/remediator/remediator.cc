// Implements the remediator's per-node state machine (remediator.h).
#include "remediator/remediator.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "api/convert.h"
#include "common/check.h"
#include "common/prometheus_text.h"
#include "common/status.h"
#include "dra/device_map.h"
#include "fmt/format.h"
#include "kube/events.h"
#include "kube/object.h"
#include "kube/pods.h"
#include "remediator/drain.h"
#include "spdlog/spdlog.h"

namespace vigil::remediator {
namespace {

using Json = nlohmann::json;

// What says how many GPUs a node has (NodeView::gpus).
constexpr std::string_view kGpuCountLabel = "nvidia.com/gpu.count";
constexpr std::string_view kGpuResource = "nvidia.com/gpu";

// How often the DeviceTaintRules of nodes that no longer exist are looked for (also at once when a
// GPU node leaves the watch).
constexpr absl::Duration kRuleSweepEvery = absl::Minutes(10);

// A reset the engine refused (the GPU still in use while evicted pods terminate) is asked again
// this long after.
constexpr absl::Duration kRefusedResetRetry = absl::Seconds(10);

// The strongest of two actions: what the node needs when several GPUs fail.
int Strength(v1::RecommendedAction action) {
  switch (action) {
    case v1::RECOMMENDED_ACTION_INSPECT:
      return 5;
    case v1::RECOMMENDED_ACTION_REBOOT:
      return 4;
    case v1::RECOMMENDED_ACTION_RESET_GPU:
      return 3;
    case v1::RECOMMENDED_ACTION_RESTART_APP:
      return 2;
    default:
      return 1;
  }
}

std::string PodList(const std::vector<DrainPodState>& pods) {
  std::string out;
  for (const DrainPodState& pod : pods) out += (out.empty() ? "" : ", ") + pod.id;
  return out.empty() ? "none" : out;
}

}  // namespace

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kOff:
      return "off";
    case Mode::kDryRun:
      return "dry-run";
    case Mode::kOn:
      return "on";
  }
  return "off";
}

std::optional<Mode> ParseMode(std::string_view name) {
  for (Mode mode : {Mode::kOff, Mode::kDryRun, Mode::kOn}) {
    if (ModeName(mode) == name) return mode;
  }
  return std::nullopt;
}

std::string_view RebootViaName(RebootVia via) {
  switch (via) {
    case RebootVia::kNone:
      return "none";
    case RebootVia::kSentinel:
      return "sentinel";
    case RebootVia::kLabel:
      return "label";
  }
  return "none";
}

std::optional<RebootVia> ParseRebootVia(std::string_view name) {
  for (RebootVia via : {RebootVia::kNone, RebootVia::kSentinel, RebootVia::kLabel}) {
    if (RebootViaName(via) == name) return via;
  }
  return std::nullopt;
}

// A GPU node as the remediator reads it.
struct Remediator::NodeView {
  std::string name, uid, resource_version;
  Json labels = Json::object(), annotations = Json::object(), taints = Json::array();
  bool unschedulable = false;
  // How many GPUs the node has: GPU Feature Discovery's nvidia.com/gpu.count label, else the
  // device plugin's nvidia.com/gpu capacity; 0 when neither says.
  size_t gpus = 0;
  // The device plugin's nvidia.com/gpu: what the node has, and what it offers now (fewer while the
  // plugin holds a GPU unhealthy); -1 when the node does not say.
  int64_t gpu_capacity = -1, gpu_allocatable = -1;
  std::string condition;  // the GpuProblem status: "True", "False", "Unknown" or "" (none)
  absl::Time condition_since = absl::InfinitePast();
  std::string condition_message;

  static NodeView From(const Json& node) {
    NodeView view;
    const Json& metadata = kube::At(node, "metadata");
    view.name = kube::StringAt(metadata, "name");
    view.uid = kube::StringAt(metadata, "uid");
    view.resource_version = kube::StringAt(metadata, "resourceVersion");
    if (kube::At(metadata, "labels").is_object()) view.labels = metadata["labels"];
    if (kube::At(metadata, "annotations").is_object()) view.annotations = metadata["annotations"];
    const Json& spec = kube::At(node, "spec");
    if (kube::At(spec, "taints").is_array()) view.taints = spec["taints"];
    view.unschedulable = kube::At(spec, "unschedulable").is_boolean() && spec["unschedulable"];
    for (const std::string& count :
         {kube::StringAt(view.labels, kGpuCountLabel),
          kube::StringAt(kube::At(kube::At(node, "status"), "capacity"), kGpuResource)}) {
      if (!count.empty() && absl::SimpleAtoi(count, &view.gpus)) break;
    }
    const Json& status = kube::At(node, "status");
    for (const auto& [field, target] : {std::pair{"capacity", &view.gpu_capacity},
                                        std::pair{"allocatable", &view.gpu_allocatable}}) {
      const std::string text = kube::StringAt(kube::At(status, field), kGpuResource);
      if (!text.empty() && !absl::SimpleAtoi(text, target)) *target = -1;
    }
    const Json& conditions = kube::At(kube::At(node, "status"), "conditions");
    for (size_t i = 0; conditions.is_array() && i < conditions.size(); ++i) {
      if (kube::StringAt(conditions[i], "type") != kConditionType) continue;
      view.condition = kube::StringAt(conditions[i], "status");
      view.condition_message = kube::StringAt(conditions[i], "message");
      std::string error;
      absl::Time since;
      if (absl::ParseTime(absl::RFC3339_full, kube::StringAt(conditions[i], "lastTransitionTime"),
                          &since, &error)) {
        view.condition_since = since;
      }
    }
    return view;
  }
  std::string Annotation(std::string_view key) const { return kube::StringAt(annotations, key); }
  bool HasTaint(std::string_view key) const {
    for (const Json& taint : taints) {
      if (kube::StringAt(taint, "key") == key && kube::StringAt(taint, "effect") == "NoSchedule") {
        return true;
      }
    }
    return false;
  }
};

// What one pass knows across nodes.
struct Remediator::Pass {
  absl::Time now;
  int active = 0;  // nodes in drain or recovery (the concurrency limit's count)
  bool breaker_open = false;
  std::string breaker_why;
  absl::Status first_error;
};

// One node's step: the changes it makes to the node, written as one merge patch that names the
// resourceVersion they were decided on, and the Events that tell of them, posted once the write
// has succeeded.
class Remediator::NodeStep {
 public:
  NodeStep(Remediator* remediator, const NodeView& view, absl::Time now)
      : remediator_(remediator), view_(view), now_(now) {}

  void SetAnnotation(std::string_view key, const std::string& value) {
    if (view_.Annotation(key) == value) return;
    patch_["metadata"]["annotations"][std::string(key)] = value;
  }
  void RemoveAnnotation(std::string_view key) {
    if (!view_.annotations.contains(std::string(key))) return;
    patch_["metadata"]["annotations"][std::string(key)] = nullptr;
  }
  void SetLabel(std::string_view key, const std::string& value) {
    if (kube::StringAt(view_.labels, key) == value) return;
    patch_["metadata"]["labels"][std::string(key)] = value;
  }
  void RemoveLabel(std::string_view key) {
    if (!view_.labels.contains(std::string(key))) return;
    patch_["metadata"]["labels"][std::string(key)] = nullptr;
  }
  void SetUnschedulable(bool unschedulable) {
    if (view_.unschedulable == unschedulable) return;
    patch_["spec"]["unschedulable"] = unschedulable ? Json(true) : Json(nullptr);
  }
  // Adds or removes our NoSchedule taint `key`; taints are an atomic list, so the patch carries
  // the whole list (safe: the resourceVersion precondition refuses it if the list moved).
  void SetTaint(std::string_view key, bool present) {
    if (view_.HasTaint(key) == present) return;
    Json taints = Json::array();
    for (const Json& taint : view_.taints) {
      if (kube::StringAt(taint, "key") != key) taints.push_back(taint);
    }
    if (present) {
      taints.push_back({{"key", std::string(key)},
                        {"value", "true"},
                        {"effect", "NoSchedule"},
                        {"timeAdded", kube::Time(now_)}});
    }
    patch_["spec"]["taints"] = std::move(taints);
  }
  void Event(std::string_view type, std::string reason, std::string message) {
    events_.push_back({std::string(type), std::move(reason), std::move(message)});
  }

  // Writes the changes (if any), then posts the Events. A 409 (the node moved since it was read)
  // means the step is taken again from the newer node next pass.
  absl::Status Write() {
    if (!patch_.is_null()) {
      patch_["metadata"]["resourceVersion"] = view_.resource_version;
      auto response = remediator_->api_->Call("PATCH", "/api/v1/nodes/" + view_.name,
                                              kube::kMergePatch, patch_.dump());
      if (!response.ok()) {
        ++remediator_->stats_.api_errors;
        return absl::UnavailableError(
            fmt::format("patching node {}: {}", view_.name, MessageOf(response.status())));
      }
      if (response->status == 409) {
        ++remediator_->stats_.conflicts;
        return absl::AbortedError(fmt::format(
            "node {} changed since it was read (409): its step is decided again", view_.name));
      }
      if (response->status < 200 || response->status >= 300) {
        ++remediator_->stats_.api_errors;
        return absl::UnavailableError(
            fmt::format("patching node {}: {} {}{}", view_.name, response->status,
                        kube::ApiMessage(response->body),
                        response->status == 403 ? " (does the service account have the "
                                                  "remediator's ClusterRole from deploy/?)"
                                                : ""));
      }
      Json node = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
      if (node.is_object()) {
        remediator_->written_nodes_[view_.name] = KeepWhatTheRemediatorReads(node);
      }
    }
    for (const auto& event : events_)
      remediator_->PostEvent(view_, event.type, event.reason, event.message, now_);
    return absl::OkStatus();
  }

 private:
  struct PendingEvent {
    std::string type, reason, message;
  };
  Remediator* const remediator_;
  const NodeView& view_;
  const absl::Time now_;
  Json patch_;
  std::vector<PendingEvent> events_;
};

Remediator::Remediator(RemediatorOptions options, kube::KubeApi* api)
    : options_(std::move(options)),
      api_(api),
      clock_(options_.clock),
      nodes_(api, {.path = "/api/v1/nodes",
                   .label_selector = options_.gpu_node_selector,
                   .transform = KeepWhatTheRemediatorReads,
                   .description = "GPU nodes",
                   .clock = options_.clock}),
      breaker_({.ns = options_.breaker_namespace,
                .name = options_.breaker_name,
                .taint_key = options_.taint_key,
                .max_tainted_share = options_.max_tainted_share,
                .identity = options_.identity},
               api),
      claims_(api) {
  // Every change the watch brings marks its node for the next pass: a pass costs the nodes that
  // changed (and those under remediation), not the fleet.
  nodes_.AddListener([this](const std::string& name) {
    absl::MutexLock lock(&changed_mutex_);
    changed_.insert(name);
  });
}

Remediator::~Remediator() { Stop(); }

void Remediator::StartWatching() { nodes_.Start(); }
void Remediator::Stop() { nodes_.Stop(); }

Json Remediator::KeepWhatTheRemediatorReads(const Json& node) {
  const Json& metadata = kube::At(node, "metadata");
  Json kept = {{"metadata",
                {{"name", kube::StringAt(metadata, "name")},
                 {"uid", kube::StringAt(metadata, "uid")},
                 {"resourceVersion", kube::StringAt(metadata, "resourceVersion")}}}};
  if (const Json& labels = kube::At(metadata, "labels"); labels.is_object()) {
    for (std::string_view key : {kNeedsInspectionLabel, kRebootRequestedLabel, kGpuCountLabel}) {
      if (labels.contains(std::string(key))) kept["metadata"]["labels"][key] = labels[key];
    }
  }
  if (const Json& annotations = kube::At(metadata, "annotations"); annotations.is_object()) {
    for (std::string_view key :
         {kFaultsAnnotation, kRemediationAnnotation, kResetRequestAnnotation,
          kResetResultAnnotation, kRebootRequestAnnotation, kRebootResultAnnotation}) {
      if (annotations.contains(std::string(key))) {
        kept["metadata"]["annotations"][key] = annotations[key];
      }
    }
  }
  const Json& spec = kube::At(node, "spec");
  if (kube::At(spec, "taints").is_array()) kept["spec"]["taints"] = spec["taints"];
  if (kube::At(spec, "unschedulable").is_boolean()) {
    kept["spec"]["unschedulable"] = spec["unschedulable"];
  }
  const Json& conditions = kube::At(kube::At(node, "status"), "conditions");
  for (size_t i = 0; conditions.is_array() && i < conditions.size(); ++i) {
    if (kube::StringAt(conditions[i], "type") == kConditionType) {
      kept["status"]["conditions"] = Json::array({conditions[i]});
    }
  }
  for (const char* field : {"capacity", "allocatable"}) {
    if (const Json& resources = kube::At(kube::At(node, "status"), field);
        resources.contains(std::string(kGpuResource))) {
      kept["status"][field][kGpuResource] = resources[std::string(kGpuResource)];
    }
  }
  return kept;
}

void Remediator::CollectRules(absl::Time now) {
  rule_sweep_due_ = false;
  next_rule_sweep_ = now + kRuleSweepEvery;
  if (options_.mode == Mode::kOff) return;
  absl::StatusOr<std::vector<DeviceClaims::NodeRule>> rules = claims_.NodeRules();
  if (absl::IsNotFound(rules.status())) return;  // no DeviceTaintRules in this cluster
  if (!rules.ok()) {
    ++stats_.api_errors;
    spdlog::warn("remediation: {}; the next sweep tries again", MessageOf(rules.status()));
    return;
  }
  for (const DeviceClaims::NodeRule& rule : *rules) {
    if (rule.node.empty() || tracked_.contains(rule.node)) continue;
    // Not a GPU node the watch knows: gone, or only out of the selector (then its check lives).
    auto node = api_->Call("GET", "/api/v1/nodes/" + rule.node, "", "");
    if (!node.ok() || node->status != 404) continue;
    if (options_.mode == Mode::kDryRun) {
      spdlog::info("remediation: [dry-run] would delete DeviceTaintRule {}: node {} is gone",
                   rule.name, rule.node);
      continue;
    }
    if (absl::Status deleted = claims_.DeleteRule(rule.name); !deleted.ok()) {
      ++stats_.api_errors;
      spdlog::warn("remediation: {}", MessageOf(deleted));
      continue;
    }
    ++stats_.rules_collected;
    spdlog::info("remediation: deleted DeviceTaintRule {}: node {} no longer exists", rule.name,
                 rule.node);
  }
}

void Remediator::PostEvent(const NodeView& view, std::string_view type, std::string_view reason,
                           const std::string& message, absl::Time now) {
  const std::string name =
      fmt::format("{}.vigil-remediator.{:x}.{}", view.name, absl::ToUnixNanos(now), ++written_);
  const Json event = kube::NodeEvent({.name = name,
                                      .ns = options_.event_namespace,
                                      .node = view.name,
                                      .node_uid = view.uid,
                                      .type = type,
                                      .reason = reason,
                                      .message = message,
                                      .component = "vigil-remediator",
                                      .instance = options_.identity,
                                      .time = now});
  spdlog::info("remediation: node {}: {} {}", view.name, reason, message);
  auto response = api_->Call("POST", "/api/v1/namespaces/" + options_.event_namespace + "/events",
                             kube::kJsonContent, event.dump());
  if (!response.ok() || response->status < 200 || response->status >= 300) {
    ++stats_.api_errors;
    // An Event is a record, not a step: the step stands, the log line above keeps it.
    spdlog::warn("remediation: node {}: could not post the {} Event: {}", view.name, reason,
                 kube::AnswerText(response));
    return;
  }
  ++stats_.events;
}

std::optional<Json> Remediator::CurrentNode(const std::string& name) {
  std::optional<Json> node = nodes_.Get(name);
  auto written = written_nodes_.find(name);
  if (written == written_nodes_.end()) return node;
  if (!node.has_value()) {
    written_nodes_.erase(written);  // deleted
    return node;
  }
  if (kube::IsLaterResourceVersion(kube::StringAt(written->second["metadata"], "resourceVersion"),
                                   kube::StringAt((*node)["metadata"], "resourceVersion"))) {
    return written->second;
  }
  written_nodes_.erase(written);  // the watch has caught up
  return node;
}

void Remediator::Track(const std::string& name, const std::optional<Json>& node, absl::Time now) {
  auto it = tracked_.find(name);
  if (it != tracked_.end()) {
    tainted_ -= it->second.tainted;
    active_ -= it->second.active;
    gpus_ -= it->second.gpus;
    out_of_service_gpus_ -= it->second.out_of_service_gpus;
    gpus_unknown_ -= it->second.gpus == 0;
  }
  if (!node.has_value()) {  // gone from the cluster (or from the selector)
    if (it != tracked_.end()) {
      tracked_.erase(it);
      rule_sweep_due_ = true;  // it may have left DeviceTaintRules behind
    }
    busy_.erase(name);
    expiring_.erase(name);
    statuses_.erase(name);
    steps_of_.erase(name);
    dry_runs_.erase(name);
    waits_.erase(name);
    return;
  }
  const NodeView view = NodeView::From(*node);
  Tracked tracked{.tainted = view.HasTaint(options_.taint_key)};
  RemediationStep step = RemediationStep::kIdle;
  absl::Time oldest_attempt = absl::InfiniteFuture();
  bool unreadable = false;
  if (const std::string text = view.Annotation(kRemediationAnnotation); !text.empty()) {
    if (auto state = ParseRemediation(text); state.ok()) {
      step = state->step;
      for (absl::Time attempt : state->attempts) oldest_attempt = std::min(oldest_attempt, attempt);
    } else {
      unreadable = true;
    }
  }
  tracked.active = step == RemediationStep::kDraining || step == RemediationStep::kRecovering;
  // Out of service: every GPU of a tainted node, else each GPU a DeviceTaintRule quarantines.
  size_t quarantined = 0;
  if (const std::string text = view.Annotation(kFaultsAnnotation); !text.empty()) {
    if (auto faults = ParseFaults(text); faults.ok()) quarantined = faults->devices.size();
  }
  tracked.gpus = std::max(view.gpus, quarantined);
  tracked.out_of_service_gpus =
      tracked.tainted || view.HasTaint(kRemediationTaint) ? tracked.gpus : quarantined;
  tainted_ += tracked.tainted;
  active_ += tracked.active;
  gpus_ += tracked.gpus;
  out_of_service_gpus_ += tracked.out_of_service_gpus;
  gpus_unknown_ += tracked.gpus == 0;
  tracked_[name] = tracked;
  // Reconciled every pass while time moves its state (a drain round, a timeout, the hysteresis,
  // a failing node waiting for a slot or the breaker); otherwise only when it changes — and, with
  // attempts on record, once the oldest leaves the window (the annotation then goes).
  const bool busy = view.condition == "True" ||
                    (step != RemediationStep::kIdle && step != RemediationStep::kEscalated);
  if (busy && !unreadable) {
    busy_.insert(name);
  } else {
    busy_.erase(name);
  }
  if (step == RemediationStep::kIdle && oldest_attempt != absl::InfiniteFuture()) {
    expiring_[name] = std::max(now, oldest_attempt + options_.attempt_window);
  } else {
    expiring_.erase(name);
  }
}

absl::Status Remediator::ReconcileOnce(absl::Time act_until) {
  Pass pass;
  pass.now = clock_->Now();
  ++stats_.passes;
  if (!nodes_.synced()) return absl::UnavailableError("the GPU nodes are not listed yet");
  // The nodes the watch changed since the last pass: their counts first, then their steps.
  std::set<std::string> due;
  {
    absl::MutexLock lock(&changed_mutex_);
    due.swap(changed_);
  }
  for (const std::string& name : due) Track(name, CurrentNode(name), pass.now);
  stats_.tracked_nodes = tracked_.size();
  // The breaker, from the counts kept: published for the health checks when it opens or closes
  // (and renewed), and applied here to new episodes.
  // The GPUs are counted only when every GPU node says how many it has: a share of the GPUs of
  // some nodes would overstate (or hide) what is out of service.
  const size_t gpus = gpus_unknown_ == 0 ? gpus_ : 0;
  const size_t out_of_service_gpus = gpus_unknown_ == 0 ? out_of_service_gpus_ : 0;
  if (absl::Status published = breaker_.Publish({.tainted_nodes = tainted_,
                                                 .gpu_nodes = tracked_.size(),
                                                 .out_of_service_gpus = out_of_service_gpus,
                                                 .gpus = gpus},
                                                pass.now);
      !published.ok()) {
    if (MessageOf(published) != breaker_error_) {
      breaker_error_ = std::string(MessageOf(published));
      spdlog::warn("remediation: {}", breaker_error_);
    }
  } else if (!breaker_error_.empty()) {
    spdlog::info("remediation: the circuit breaker is published again");
    breaker_error_.clear();
  }
  if (rule_sweep_due_ || pass.now >= next_rule_sweep_) CollectRules(pass.now);
  pass.active = active_;
  // The health check's breaker, seen cluster-wide: more tainted than it would let be.
  if (tainted_ > MaxTaintedNodes(options_.max_tainted_share, tracked_.size())) {
    pass.breaker_open = true;
    pass.breaker_why = fmt::format("{} of {} GPU nodes are tainted, more than {:.0f}%", tainted_,
                                   tracked_.size(), options_.max_tainted_share * 100);
  } else if (gpus > 0 && out_of_service_gpus > MaxTaintedNodes(options_.max_tainted_share, gpus)) {
    pass.breaker_open = true;
    pass.breaker_why = fmt::format("{} of {} GPUs are out of service, more than {:.0f}%",
                                   out_of_service_gpus, gpus, options_.max_tainted_share * 100);
  }
  stats_.breaker_open = pass.breaker_open;
  due.insert(busy_.begin(), busy_.end());
  for (const auto& [name, when] : expiring_) {
    if (when <= pass.now) due.insert(name);
  }
  stats_.last_pass_nodes = due.size();
  stats_.nodes_reconciled += due.size();
  for (auto name = due.begin(); name != due.end(); ++name) {
    if (clock_->Now() >= act_until) {
      if (pass.first_error.ok()) {
        pass.first_error = absl::DeadlineExceededError("the pass stopped before node " + *name +
                                                       ": the Lease is due for renewal");
      }
      absl::MutexLock lock(&changed_mutex_);
      changed_.insert(name, due.end());  // not forgotten: first in the next pass
      break;
    }
    const std::optional<Json> node = CurrentNode(*name);
    if (!node.has_value()) continue;  // gone (Track forgot it)
    absl::Status status = ReconcileNode(*name, *node, pass);
    if (!status.ok()) {
      spdlog::warn("remediation: {}", MessageOf(status));
      if (pass.first_error.ok()) pass.first_error = status;
      // A step not written (no answer, 5xx: no watch event will bring the node back) is taken
      // again next pass; a state that cannot be read waits for someone to change it.
      if (!absl::IsInvalidArgument(status)) {
        absl::MutexLock lock(&changed_mutex_);
        changed_.insert(*name);
      }
    }
    Track(*name, CurrentNode(*name), pass.now);  // what its write changed counts at once
  }
  // /status and the step counts, from the nodes listed (under remediation or failing).
  Json status = Json::array();
  for (const auto& [name, line] : statuses_) status.push_back(line);
  std::map<std::string, int> steps;
  for (const auto& [name, step] : steps_of_) ++steps[step];
  steps[std::string(RemediationStepName(RemediationStep::kIdle))] =
      static_cast<int>(tracked_.size() - steps_of_.size());
  absl::MutexLock lock(&status_mutex_);
  status_ = std::move(status);
  steps_ = std::move(steps);
  return pass.first_error;
}

std::string_view TransitionName(Transition transition) {
  switch (transition) {
    case Transition::kTakeOn:
      return "take-on";
    case Transition::kEscalate:
      return "escalate";
    case Transition::kDrained:
      return "drained";
    case Transition::kDrainTimedOut:
      return "drain-timed-out";
    case Transition::kHealthyAgain:
      return "healthy-again";
    case Transition::kRecovered:
      return "recovered";
    case Transition::kVerified:
      return "verified";
    case Transition::kFailedAttempt:
      return "failed-attempt";
    case Transition::kHandedBack:
      return "handed-back";
  }
  return "take-on";
}

namespace {

// Every arrow of the per-node state machine: from a step, on a transition, to a step.
struct Arrow {
  RemediationStep from;
  Transition on;
  RemediationStep to;
};
constexpr Arrow kArrows[] = {
    {RemediationStep::kIdle, Transition::kTakeOn, RemediationStep::kDraining},
    {RemediationStep::kIdle, Transition::kEscalate, RemediationStep::kEscalated},
    {RemediationStep::kDraining, Transition::kDrained, RemediationStep::kRecovering},
    {RemediationStep::kDraining, Transition::kDrainTimedOut, RemediationStep::kDrainStuck},
    {RemediationStep::kDrainStuck, Transition::kHealthyAgain, RemediationStep::kIdle},
    {RemediationStep::kRecovering, Transition::kRecovered, RemediationStep::kVerifying},
    {RemediationStep::kRecovering, Transition::kEscalate, RemediationStep::kEscalated},
    {RemediationStep::kVerifying, Transition::kVerified, RemediationStep::kIdle},
    {RemediationStep::kVerifying, Transition::kFailedAttempt, RemediationStep::kIdle},
    {RemediationStep::kVerifying, Transition::kEscalate, RemediationStep::kEscalated},
    {RemediationStep::kEscalated, Transition::kHandedBack, RemediationStep::kIdle},
};

}  // namespace

std::optional<RemediationStep> NextStep(RemediationStep from, Transition transition) {
  for (const Arrow& arrow : kArrows) {
    if (arrow.from == from && arrow.on == transition) return arrow.to;
  }
  return std::nullopt;
}

ActionChoice ChooseAction(const PublishedFaults& faults) {
  ActionChoice choice{.drill_only = true};
  // A drill's fault without permission drives nothing: only the actionable faults choose the
  // action and the GPUs (the others are dry-run when they are all there is).
  for (const PublishedFault& fault : faults.faults) choice.drill_only &= !fault.actionable();
  for (const PublishedFault& fault : faults.faults) {
    if ((fault.actionable() || choice.drill_only) &&
        Strength(fault.action) > Strength(choice.action)) {
      choice.action = fault.action;
    }
  }
  for (const PublishedFault& fault : faults.faults) {
    if (fault.action != choice.action || !(fault.actionable() || choice.drill_only)) continue;
    if (fault.gpu >= 0 && std::none_of(choice.gpus.begin(), choice.gpus.end(),
                                       [&](const GpuRef& gpu) { return gpu.uuid == fault.uuid; })) {
      choice.gpus.push_back({.index = static_cast<uint32_t>(fault.gpu), .uuid = fault.uuid});
    }
    const std::string subject = fault.gpu >= 0 ? fmt::format("GPU {}", fault.gpu) : "node";
    choice.incident += fmt::format("{}{} {} {}{}", choice.incident.empty() ? "" : "; ", subject,
                                   fault.system, fault.code, fault.injected ? " [injected]" : "");
  }
  return choice;
}

// One node's pass through the state machine: the function of its step decides what to do (the
// changes go into `step`, written after) and returns the arrow it takes, if any. Lives for one
// ReconcileNode() call, on the pass's thread.
class Remediator::Episode {
 public:
  Episode(Remediator& remediator, const NodeView& view, NodeRemediation& state, NodeStep& step,
          Pass& pass, std::optional<PublishedFaults> faults)
      : r_(remediator),
        view_(view),
        name_(view.name),
        state_(state),
        step_(step),
        pass_(pass),
        now_(pass.now),
        faults_(std::move(faults)),
        failing_(view.condition == "True"),
        healthy_(view.condition == "False") {}

  // Not --mode on: an episode under way (or an escalation) is frozen where it is — reported,
  // never advanced (a roll-back to dry-run mid-incident changes nothing from then on).
  std::optional<Transition> Run() {
    if (r_.options_.mode != Mode::kOn && state_.step != RemediationStep::kIdle) return Frozen();
    switch (state_.step) {
      case RemediationStep::kIdle:
        return Idle();
      case RemediationStep::kDraining:
        return Draining();
      case RemediationStep::kDrainStuck:
        return DrainStuck();
      case RemediationStep::kRecovering:
        return Recovering();
      case RemediationStep::kVerifying:
        return Verifying();
      case RemediationStep::kEscalated:
        return Escalated();
    }
    return std::nullopt;
  }
  // A step that could not be decided (the pods or claims could not be read): OK otherwise.
  const absl::Status& error() const { return error_; }

 private:
  std::optional<Transition> Frozen() {
    WaitOnce(fmt::format("frozen at {} (--mode {})", RemediationStepName(state_.step),
                         ModeName(r_.options_.mode)),
             WaitTold::kLogWarning, ": nothing is done until --mode on");
    return std::nullopt;
  }

  // How a wait is told, once per wait.
  enum class WaitTold : uint8_t { kLogWarning, kLogInfo, kEvent };
  // Records that the node waits for `why` (told once: a log line, or an Event).
  void WaitOnce(const std::string& why, WaitTold told, std::string_view detail = "") {
    std::string& last = r_.waits_[name_];
    if (last == why) return;
    last = why;
    switch (told) {
      case WaitTold::kLogWarning:
        spdlog::warn("remediation: node {}: {}{}", name_, why, detail);
        break;
      case WaitTold::kLogInfo:
        spdlog::info("remediation: node {}: {}{}", name_, why, detail);
        break;
      case WaitTold::kEvent:
        step_.Event("Normal", "VigilWaiting", fmt::format("{} waits: {}", detail, why));
        break;
    }
  }

  std::optional<Transition> Idle() {
    if (!failing_ || r_.options_.mode == Mode::kOff) {
      r_.dry_runs_.erase(name_);
      r_.waits_.erase(name_);
      return std::nullopt;
    }
    if (!faults_.has_value()) {
      WaitOnce(fmt::format("fails but its health check has published no {} annotation (is it a "
                           "Vigil health check with --kubernetes that publishes faults?)",
                           kFaultsAnnotation),
               WaitTold::kLogWarning, ": waiting");
      return std::nullopt;
    }
    const ActionChoice choice = ChooseAction(*faults_);
    if (faults_->faults.empty() || choice.action == v1::RECOMMENDED_ACTION_NONE) {
      WaitOnce("fails, but no fault recommends an action", WaitTold::kLogInfo);
      return std::nullopt;
    }
    // The GPUs the health check's DeviceTaintRules take out of service: the node itself stays in
    // service (no node taint) when they cover every GPU of the episode.
    const std::vector<QuarantinedDevice> devices = DevicesOf(choice.gpus);
    const bool gpus_quarantined = !choice.gpus.empty() && devices.size() == choice.gpus.size();
    const bool reboot = choice.action == v1::RECOMMENDED_ACTION_REBOOT;
    const bool node_quarantined = view_.HasTaint(r_.options_.taint_key);
    const EpisodeScope scope =
        !node_quarantined && gpus_quarantined && !reboot ? EpisodeScope::kGpu : EpisodeScope::kNode;
    if (r_.options_.mode == Mode::kDryRun || choice.drill_only) {
      return DryRun(choice, scope, devices);
    }
    r_.dry_runs_.erase(name_);
    // A fleet-wide false alarm must neither drain nor label the fleet.
    if (pass_.breaker_open) {
      if (r_.waits_[name_] != pass_.breaker_why) {
        r_.waits_[name_] = pass_.breaker_why;
        step_.Event("Warning", "VigilCircuitBreakerOpen",
                    fmt::format("{} waits: {} — a fleet-wide problem is not drained node by node",
                                choice.incident, pass_.breaker_why));
      }
      return std::nullopt;
    }
    if (state_.attempts.size() >= static_cast<size_t>(r_.options_.max_attempts)) {
      Remember(choice);
      return Escalate(fmt::format("failed again after {} recover{} in {}: {}",
                                  state_.attempts.size(), state_.attempts.size() == 1 ? "y" : "ies",
                                  absl::FormatDuration(r_.options_.attempt_window),
                                  choice.incident));
    }
    if (choice.action == v1::RECOMMENDED_ACTION_INSPECT) {
      Remember(choice);
      return Escalate(
          fmt::format("the fault needs a person, not an automatic action: {}", choice.incident));
    }
    if (pass_.active >= r_.options_.max_concurrent) {
      WaitOnce(fmt::format("{} node(s) already in drain or recovery (--max-concurrent {})",
                           pass_.active, r_.options_.max_concurrent),
               WaitTold::kEvent, choice.incident);
      return std::nullopt;
    }
    if (!node_quarantined && !gpus_quarantined && !r_.options_.cordon) {
      WaitOnce(fmt::format("the node is not quarantined: no {} taint yet (does its health check "
                           "run with --taint?), no DeviceTaintRule for each failing GPU, and no "
                           "--cordon",
                           r_.options_.taint_key),
               WaitTold::kLogWarning, ": not draining");
      return std::nullopt;
    }
    r_.waits_.erase(name_);
    absl::StatusOr<DrainOptions> drain_options = DrainFor(choice, scope, devices);
    if (!drain_options.ok()) {
      error_ = drain_options.status();
      return std::nullopt;
    }
    const DrainReport plan = PlanDrain(*r_.api_, name_, *drain_options);
    if (!plan.error.empty()) {
      error_ = absl::UnavailableError(
          fmt::format("node {}: cannot list its pods to drain: {}", name_, plan.error));
      return std::nullopt;
    }
    // Quarantine: the health check's taint or rules are on; a cordon as an option, and for a
    // reboot of a node whose GPUs alone were quarantined, the remediator's own taint.
    Remember(choice);
    state_.episode_started = now_;
    state_.scope = scope;
    state_.devices = devices;
    if (r_.options_.cordon && !view_.unschedulable) {
      step_.SetUnschedulable(true);
      state_.cordoned = true;
    }
    if (reboot && !node_quarantined) {
      step_.SetTaint(kRemediationTaint, true);
      state_.node_tainted = true;
    }
    state_.drain.clear();
    for (const DrainedPod& pod : plan.pods) {
      state_.drain.push_back({.id = pod.ns + "/" + pod.name});
    }
    state_.drain_rounds = 0;
    state_.drain_next = now_;
    state_.message = fmt::format("evicting {}", PodList(state_.drain));
    ++r_.stats_.episodes;
    ++pass_.active;
    step_.Event(
        "Warning", "VigilQuarantined",
        fmt::format("{} ({}): {}; draining {}", choice.incident,
                    RecommendedActionText(choice.action), QuarantineText(), PodList(state_.drain)));
    return Transition::kTakeOn;
  }

  // Every step it would take, recorded once per episode; nothing on the node changes.
  std::optional<Transition> DryRun(const ActionChoice& choice, EpisodeScope scope,
                                   const std::vector<QuarantinedDevice>& devices) {
    const std::string episode = choice.incident + "|" + kube::Time(view_.condition_since);
    if (r_.dry_runs_[name_] == episode) return std::nullopt;
    r_.dry_runs_[name_] = episode;
    const std::string why = choice.drill_only
                                ? "the faults are a drill's, injected without --allow-actions"
                                : "--mode dry-run";
    std::vector<std::string> would;
    if (state_.attempts.size() >= static_cast<size_t>(r_.options_.max_attempts) ||
        choice.action == v1::RECOMMENDED_ACTION_INSPECT) {
      would.push_back(
          fmt::format("label {}=true and keep the node quarantined", kNeedsInspectionLabel));
    } else {
      if (r_.options_.cordon) would.push_back("cordon the node");
      if (scope == EpisodeScope::kGpu) {
        would.push_back(fmt::format("keep the node in service: {} quarantined by {}",
                                    GpuRefsText(choice.gpus), RuleList(devices)));
      }
      absl::StatusOr<DrainOptions> drain = DrainFor(choice, scope, devices);
      if (!drain.ok()) {
        would.push_back(
            fmt::format("evict the pods (cannot tell which: {})", MessageOf(drain.status())));
      } else {
        drain->dry_run = true;
        const DrainReport plan = PlanDrain(*r_.api_, name_, *drain);
        std::string pods;
        for (const DrainedPod& pod : plan.pods) {
          pods += fmt::format("{}{}/{}", pods.empty() ? "" : ", ", pod.ns, pod.name);
        }
        would.push_back(plan.error.empty()
                            ? fmt::format("evict {}", pods.empty() ? "no pod" : pods)
                            : fmt::format("evict the pods (cannot list them: {})", plan.error));
      }
      if (choice.action == v1::RECOMMENDED_ACTION_RESET_GPU) {
        would.push_back(fmt::format("reset {}", GpuRefsText(choice.gpus)));
      } else if (choice.action == v1::RECOMMENDED_ACTION_REBOOT) {
        would.push_back(
            fmt::format("request a reboot ({})", RebootViaName(r_.options_.reboot_via)));
      }
      would.push_back(fmt::format("hand the {} back after PASS for {}",
                                  scope == EpisodeScope::kGpu ? "GPU" : "node",
                                  absl::FormatDuration(r_.options_.untaint_after)));
    }
    for (size_t i = 0; i < would.size(); ++i) {
      step_.Event(
          "Normal", "VigilDryRun",
          fmt::format("[dry-run: {}] {} ({}): step {} of {}: would {}", why, choice.incident,
                      RecommendedActionText(choice.action), i + 1, would.size(), would[i]));
      ++r_.stats_.dry_run_steps;
    }
    return std::nullopt;
  }

  std::optional<Transition> Draining() {
    if (now_ >= state_.drain_next) EvictionRound();
    // The last resort, when configured: what a PodDisruptionBudget still holds is deleted.
    if (r_.options_.force_after.has_value() &&
        now_ - state_.step_started >= *r_.options_.force_after) {
      DeleteBlockedPods();
    }
    if (std::all_of(state_.drain.begin(), state_.drain.end(),
                    [](const DrainPodState& pod) { return IsDrained(pod.outcome); })) {
      step_.Event("Normal", "VigilDrained",
                  fmt::format("{}: drained (evicted: {})", state_.incident, PodList(state_.drain)));
      state_.message = "drained; recovering";
      state_.request_id.clear();
      return Transition::kDrained;
    }
    if (now_ - state_.step_started < r_.options_.drain_timeout) return std::nullopt;
    std::string left;
    for (const DrainPodState& pod : state_.drain) {
      if (IsDrained(pod.outcome)) continue;
      left += fmt::format("{}{} ({}, {} attempts)", left.empty() ? "" : ", ", pod.id,
                          DrainPodOutcomeName(pod.outcome), pod.attempts);
    }
    state_.message = fmt::format("the drain did not finish in {}: {} left",
                                 absl::FormatDuration(r_.options_.drain_timeout), left);
    step_.Event("Warning", "VigilDrainStuck",
                fmt::format("{}: {}; stopped, the {} stays quarantined (a person decides: fix "
                            "the PodDisruptionBudget or move the pods)",
                            state_.incident, state_.message,
                            state_.scope == EpisodeScope::kGpu ? "GPU" : "node"));
    return Transition::kDrainTimedOut;
  }

  // One eviction round over the pods that want another try; the outcomes kept in the state.
  void EvictionRound() {
    std::vector<DrainedPod> pods;
    for (const DrainPodState& pod : state_.drain) {
      const size_t slash = pod.id.find('/');
      DrainedPod drained{.ns = pod.id.substr(0, slash),
                         .name = slash == std::string::npos ? "" : pod.id.substr(slash + 1),
                         .outcome = DrainedOutcomeOf(pod.outcome),
                         .attempts = pod.attempts,
                         .unanswered = pod.outcome == DrainPodOutcome::kRetry};
      pods.push_back(std::move(drained));
    }
    const std::vector<DrainedPod> before_round = pods;
    absl::Duration retry_after;
    EvictRound(*r_.api_, &pods, &retry_after);
    ++state_.drain_rounds;
    state_.drain_next = NextRoundAfter(now_, state_.drain_rounds, retry_after);
    for (size_t i = 0; i < pods.size(); ++i) {
      if (pods[i].attempts == before_round[i].attempts) continue;
      switch (pods[i].outcome) {
        case DrainedPod::Outcome::kEvicted:
          ++r_.stats_.evictions_evicted;
          break;
        case DrainedPod::Outcome::kGone:
          ++r_.stats_.evictions_gone;
          break;
        case DrainedPod::Outcome::kBlocked:
          ++r_.stats_.evictions_blocked;
          break;
        default:
          ++r_.stats_.evictions_failed;
          break;
      }
      state_.drain[i].outcome = StateOutcomeOf(pods[i]);
      state_.drain[i].attempts = pods[i].attempts;
    }
  }

  void DeleteBlockedPods() {
    std::string deleted;
    for (DrainPodState& pod : state_.drain) {
      if (pod.outcome != DrainPodOutcome::kBlocked) continue;
      const size_t slash = pod.id.find('/');
      auto gone = kube::DeletePod(*r_.api_, pod.id.substr(0, slash),
                                  slash == std::string::npos ? "" : pod.id.substr(slash + 1));
      if (!gone.ok()) {
        spdlog::warn("remediation: node {}: {}", name_, MessageOf(gone.status()));
        continue;
      }
      pod.outcome = *gone ? DrainPodOutcome::kDeleted : DrainPodOutcome::kGone;
      ++r_.stats_.pods_deleted;
      deleted += (deleted.empty() ? "" : ", ") + pod.id;
    }
    if (deleted.empty()) return;
    step_.Event(
        "Warning", "VigilPodsDeleted",
        fmt::format("{}: deleted {}: a PodDisruptionBudget still blocked its eviction "
                    "after {} (--force-after)",
                    state_.incident, deleted, absl::FormatDuration(*r_.options_.force_after)));
  }

  std::optional<Transition> DrainStuck() {
    if (!healthy_ || now_ - view_.condition_since < r_.options_.untaint_after) {
      return std::nullopt;
    }
    HandBack("healthy again after a stuck drain");
    step_.Event("Normal", "VigilRecovered",
                fmt::format("{}: PASS for {} after the drain got stuck; handed back",
                            state_.incident, absl::FormatDuration(r_.options_.untaint_after)));
    return Transition::kHealthyAgain;
  }

  std::optional<Transition> Recovering() {
    // restart-app recovers like reset-gpu: its workloads are drained (they restart elsewhere),
    // and a reset of the now idle GPU ends its sticky FAIL.
    if (state_.action == v1::RECOMMENDED_ACTION_RESET_GPU ||
        state_.action == v1::RECOMMENDED_ACTION_RESTART_APP) {
      return RecoverByReset();
    }
    if (state_.action == v1::RECOMMENDED_ACTION_REBOOT) return RecoverByReboot();
    return std::nullopt;
  }

  std::optional<Transition> RecoverByReset() {
    if (state_.gpus.empty()) {
      return Escalate(fmt::format(
          "{} recommends a GPU reset, but names no GPU (a node-level fault): a person decides "
          "what to reset",
          state_.incident));
    }
    if (state_.request_id.empty()) {
      const ActionRequest request{
          .id = fmt::format("reset-{}-{:x}-{}", name_, absl::ToUnixSeconds(now_), ++r_.written_),
          .gpus = state_.gpus,
          .reason = fmt::format("vigil remediator: {}", state_.incident),
          .requested = now_};
      step_.SetAnnotation(kResetRequestAnnotation, RequestToJson(request));
      state_.request_id = request.id;
      state_.message =
          fmt::format("asked the node's health check to reset {}", GpuRefsText(state_.gpus));
      ++r_.stats_.resets_requested;
      step_.Event("Normal", "VigilResetRequested",
                  fmt::format("{}: reset of {} requested ({})", state_.incident,
                              GpuRefsText(state_.gpus), request.id));
      return std::nullopt;
    }
    auto result = ParseResult(view_.Annotation(kResetResultAnnotation));
    if (result.ok() && result->id == state_.request_id) {
      if (result->outcome == ActionOutcome::kDone) {
        state_.attempts.push_back(now_);
        state_.message = fmt::format("reset done; verifying PASS for {}",
                                     absl::FormatDuration(r_.options_.untaint_after));
        step_.RemoveAnnotation(kResetRequestAnnotation);
        step_.Event("Normal", "VigilGpuReset",
                    fmt::format("{}: {} reset: {}", state_.incident, GpuRefsText(state_.gpus),
                                result->message));
        return Transition::kRecovered;
      }
      if (result->outcome == ActionOutcome::kRefused &&
          now_ - state_.step_started < r_.options_.recovery_timeout) {
        if (now_ - result->finished >= kRefusedResetRetry) state_.request_id.clear();
        state_.message = fmt::format("the reset was refused, asking again: {}", result->message);
        return std::nullopt;
      }
      state_.attempts.push_back(now_);
      ++r_.stats_.failed_attempts;
      return Escalate(
          fmt::format("the reset of {} {}: {}", GpuRefsText(state_.gpus),
                      result->outcome == ActionOutcome::kRefused ? "kept being refused" : "failed",
                      result->message));
    }
    if (now_ - state_.step_started >= r_.options_.recovery_timeout) {
      return Escalate(fmt::format(
          "no answer to the reset request {} from the node's health check in {} (does it run "
          "with --relay-actions and the engine's token?)",
          state_.request_id, absl::FormatDuration(r_.options_.recovery_timeout)));
    }
    return std::nullopt;
  }

  std::optional<Transition> RecoverByReboot() {
    if (state_.request_id.empty()) {
      state_.request_id =
          fmt::format("reboot-{}-{:x}-{}", name_, absl::ToUnixSeconds(now_), ++r_.written_);
      state_.attempts.push_back(now_);
      ++r_.stats_.reboots_requested;
      const std::string reason = fmt::format("vigil remediator: {}", state_.incident);
      switch (r_.options_.reboot_via) {
        case RebootVia::kSentinel:
          step_.SetAnnotation(
              kRebootRequestAnnotation,
              RequestToJson({.id = state_.request_id, .reason = reason, .requested = now_}));
          state_.message = "asked the node's health check for the reboot sentinel";
          break;
        case RebootVia::kLabel:
          step_.SetLabel(kRebootRequestedLabel, "true");
          state_.message =
              fmt::format("labelled {}=true for the repair operator", kRebootRequestedLabel);
          break;
        case RebootVia::kNone:
          state_.message = "a reboot is needed: no --reboot-via, so a person reboots it";
          break;
      }
      step_.Event("Warning", "VigilRebootRequested",
                  fmt::format("{}: {} ({})", state_.incident, state_.message, state_.request_id));
      return std::nullopt;
    }
    if (healthy_ &&
        view_.condition_since >= absl::FromUnixSeconds(absl::ToUnixSeconds(state_.step_started))) {
      step_.RemoveLabel(kRebootRequestedLabel);
      step_.RemoveAnnotation(kRebootRequestAnnotation);
      state_.message = fmt::format("back after the reboot; verifying PASS for {}",
                                   absl::FormatDuration(r_.options_.untaint_after));
      return Transition::kRecovered;
    }
    if (auto result = ParseResult(view_.Annotation(kRebootResultAnnotation));
        result.ok() && result->id == state_.request_id &&
        result->outcome == ActionOutcome::kFailed) {
      ++r_.stats_.failed_attempts;
      return Escalate(fmt::format("the reboot could not be requested: {}", result->message));
    }
    if (now_ - state_.step_started >= r_.options_.recovery_timeout) {
      ++r_.stats_.failed_attempts;
      return Escalate(fmt::format("not back to PASS {} after the reboot was requested",
                                  absl::FormatDuration(r_.options_.recovery_timeout)));
    }
    return std::nullopt;
  }

  std::optional<Transition> Verifying() {
    // The condition the recovery started from may still say FAIL for a tick or two (the engine
    // sees the reset at its next read, the health check writes after that): only a transition to
    // FAIL since the recovery (or a FAIL that outlasts --recovery-timeout) is a failed attempt.
    // lastTransitionTime has second precision.
    const bool failed_again =
        failing_ &&
        (view_.condition_since >= absl::FromUnixSeconds(absl::ToUnixSeconds(state_.step_started)) ||
         now_ - state_.step_started >= r_.options_.recovery_timeout);
    if (failed_again) {
      ++r_.stats_.failed_attempts;
      if (state_.attempts.size() >= static_cast<size_t>(r_.options_.max_attempts)) {
        return Escalate(
            fmt::format("FAIL again after {} recover{} in {}: {}", state_.attempts.size(),
                        state_.attempts.size() == 1 ? "y" : "ies",
                        absl::FormatDuration(r_.options_.attempt_window), state_.incident));
      }
      HandBack("FAIL again after the recovery: a failed attempt; starting over");
      step_.Event("Warning", "VigilRecoveryFailed",
                  fmt::format("{}: FAIL again after the recovery (attempt {} of {})",
                              state_.incident, state_.attempts.size(), r_.options_.max_attempts));
      return Transition::kFailedAttempt;
    }
    if (!healthy_ ||
        now_ - std::max(state_.step_started, view_.condition_since) < r_.options_.untaint_after ||
        view_.HasTaint(r_.options_.taint_key) || !QuarantineLifted()) {
      return std::nullopt;
    }
    const std::string incident = state_.incident;
    const v1::RecommendedAction action = state_.action;
    const EpisodeScope scope = state_.scope;
    HandBack(
        fmt::format("recovered: PASS for {}", absl::FormatDuration(r_.options_.untaint_after)));
    ++r_.stats_.recoveries;
    step_.Event(
        "Normal", "VigilRecovered",
        fmt::format("{}: PASS for {} after the {}; {} handed back", incident,
                    absl::FormatDuration(r_.options_.untaint_after), RecommendedActionText(action),
                    scope == EpisodeScope::kGpu ? "the GPU's quarantine lifted and" : "the node"));
    RestartDevicePlugin(incident);
    return Transition::kVerified;
  }

  // A device plugin that marked the GPU unhealthy never offers it again until it restarts: when
  // the node's allocatable nvidia.com/gpu is below its capacity after the recovery, its plugin pod
  // on this node is deleted (once: the hand-back happens once), and an Event says why. An error
  // is counted and told; the node is handed back anyway (a person restarts the plugin).
  void RestartDevicePlugin(const std::string& incident) {
    if (r_.options_.device_plugin_selector.empty() || view_.gpu_capacity < 0 ||
        view_.gpu_allocatable < 0 || view_.gpu_allocatable >= view_.gpu_capacity) {
      return;
    }
    const std::string why = fmt::format("allocatable {} is {} of {} after the recovery",
                                        kGpuResource, view_.gpu_allocatable, view_.gpu_capacity);
    absl::StatusOr<std::vector<Json>> pods =
        kube::ListPodsOnNode(*r_.api_, name_, r_.options_.device_plugin_selector);
    std::vector<std::string> deleted;
    std::string error = pods.ok() ? "" : std::string(MessageOf(pods.status()));
    for (const Json& pod : pods.ok() ? *pods : std::vector<Json>{}) {
      const Json& metadata = kube::At(pod, "metadata");
      const std::string ns = kube::StringAt(metadata, "namespace");
      if (ns != r_.options_.device_plugin_namespace) continue;
      const std::string pod_name = kube::StringAt(metadata, "name");
      absl::StatusOr<bool> gone = kube::DeletePod(*r_.api_, ns, pod_name);
      if (!gone.ok()) {
        error = std::string(MessageOf(gone.status()));
        continue;
      }
      deleted.push_back(ns + "/" + pod_name);
    }
    if (!deleted.empty()) {
      r_.stats_.device_plugin_restarts += deleted.size();
      // In the node's record too: the drill's timeline shows the way back through it.
      state_.message += fmt::format("; restarted the device plugin ({}: deleted its pod {})", why,
                                    absl::StrJoin(deleted, ", "));
      step_.Event("Normal", "VigilDevicePluginRestarted",
                  fmt::format("{}: {}: deleted the device plugin's pod {} so that it offers the "
                              "recovered GPU again",
                              incident, why, absl::StrJoin(deleted, ", ")));
      return;
    }
    ++r_.stats_.api_errors;
    state_.message += fmt::format(
        "; the device plugin could not be restarted ({}): restart it "
        "by hand",
        why);
    step_.Event("Warning", "VigilDevicePluginNotRestarted",
                fmt::format("{}: {}, but the device plugin's pod could not be restarted ({}): "
                            "restart it by hand",
                            incident, why,
                            error.empty() ? fmt::format("no pod matches {} in namespace {}",
                                                        r_.options_.device_plugin_selector,
                                                        r_.options_.device_plugin_namespace)
                                          : error));
  }

  // The health check has removed the DeviceTaintRules of the episode (after its hysteresis). An
  // error reading one leaves the node where it is this pass.
  bool QuarantineLifted() {
    for (const QuarantinedDevice& device : state_.devices) {
      absl::StatusOr<bool> exists = r_.claims_.RuleExists(device.rule);
      if (!exists.ok()) {
        error_ =
            absl::UnavailableError(fmt::format("node {}: {}", name_, MessageOf(exists.status())));
        return false;
      }
      if (*exists) {
        state_.message = fmt::format(
            "PASS; waiting for the health check to lift DeviceTaintRule {}", device.rule);
        return false;
      }
    }
    return true;
  }

  std::optional<Transition> Escalated() {
    if (view_.labels.contains(std::string(kNeedsInspectionLabel))) {
      step_.SetTaint(kNeedsInspectionTaint, true);  // put back if someone took it off alone
      return std::nullopt;
    }
    step_.SetTaint(kNeedsInspectionTaint, false);
    HandBack("handed back by a person (the needs-inspection label was removed)");
    state_.attempts.clear();
    step_.Event("Normal", "VigilHandedBack",
                fmt::format("the {} label was removed: the remediator's taint is gone and its "
                            "attempts are forgotten",
                            kNeedsInspectionLabel));
    return Transition::kHandedBack;
  }

  // Escalation: labelled, kept quarantined with the remediator's own taint.
  Transition Escalate(const std::string& why) {
    state_.message = why;
    step_.SetLabel(kNeedsInspectionLabel, "true");
    step_.SetTaint(kNeedsInspectionTaint, true);
    step_.RemoveAnnotation(kResetRequestAnnotation);
    step_.RemoveAnnotation(kRebootRequestAnnotation);
    step_.Event("Warning", "VigilNeedsInspection",
                fmt::format("{}: labelled {}=true and kept quarantined; remove the label to hand "
                            "the node back",
                            why, kNeedsInspectionLabel));
    ++r_.stats_.escalations;
    return Transition::kEscalate;
  }

  // The end of an episode: what the remediator added goes, its attempts stay for the window.
  void HandBack(const std::string& why) {
    if (state_.cordoned) step_.SetUnschedulable(false);
    if (state_.node_tainted) step_.SetTaint(kRemediationTaint, false);
    step_.RemoveLabel(kRebootRequestedLabel);
    step_.RemoveAnnotation(kResetRequestAnnotation);
    step_.RemoveAnnotation(kRebootRequestAnnotation);
    state_.cordoned = false;
    state_.node_tainted = false;
    state_.scope = EpisodeScope::kNode;
    state_.devices.clear();
    state_.drain.clear();
    state_.drain_rounds = 0;
    state_.request_id.clear();
    state_.message = why;
  }

  void Remember(const ActionChoice& choice) {
    state_.action = choice.action;
    state_.gpus = choice.gpus;
    state_.incident = choice.incident;
  }

  // The published quarantined devices of `gpus` (those DeviceTaintRules cover).
  std::vector<QuarantinedDevice> DevicesOf(const std::vector<GpuRef>& gpus) const {
    std::vector<QuarantinedDevice> devices;
    for (const GpuRef& gpu : gpus) {
      for (const QuarantinedDevice& device : faults_->devices) {
        if (device.uuid == gpu.uuid) {
          devices.push_back(device);
          break;
        }
      }
    }
    return devices;
  }

  // Which pods the drain evicts. A reboot: every GPU pod (every pod with --drain-all-pods).
  // Otherwise the pods of the failing GPUs when they are known — the kubelet's view (the health
  // check's published pods) and, for GPUs quarantined as DRA devices, the pods whose
  // ResourceClaims hold them — else every GPU pod.
  absl::StatusOr<DrainOptions> DrainFor(const ActionChoice& choice, EpisodeScope scope,
                                        const std::vector<QuarantinedDevice>& devices) {
    DrainOptions options{
        .all_pods = choice.action == v1::RECOMMENDED_ACTION_REBOOT && r_.options_.drain_all_pods,
        .exclude_namespaces = r_.options_.exclude_namespaces};
    if (choice.action == v1::RECOMMENDED_ACTION_REBOOT) {
      // Pods that hold GPUs through ResourceClaims carry no nvidia.com/* resource: those whose
      // claims hold a device of the node's GPU pools (NVIDIA's driver names the pool after the
      // node; a quarantined device names its own).
      std::set<std::pair<std::string, std::string>> pools = {
          {std::string(dra::kNvidiaGpuDriver), name_}};
      for (const QuarantinedDevice& device : faults_->devices) {
        pools.insert({device.driver, device.pool});
      }
      for (const auto& [driver, pool] : pools) {
        absl::StatusOr<std::vector<std::string>> holding =
            r_.claims_.PodsHoldingPool(name_, driver, pool);
        if (absl::IsNotFound(holding.status())) break;  // no DRA in this cluster
        if (!holding.ok()) {
          return absl::UnavailableError(
              fmt::format("node {}: cannot tell which pods hold its GPUs "
                          "through ResourceClaims: {}",
                          name_, MessageOf(holding.status())));
        }
        options.claim_holders.insert(options.claim_holders.end(), holding->begin(), holding->end());
      }
      return options;
    }
    const auto add = [&](const std::string& pod) {
      if (std::find(options.only->begin(), options.only->end(), pod) == options.only->end()) {
        options.only->push_back(pod);
      }
    };
    if (faults_->pods_known) {
      options.only.emplace();
      for (const GpuPods& gpu : faults_->gpu_pods) {
        for (const GpuRef& failing : choice.gpus) {
          if (gpu.uuid != failing.uuid) continue;
          for (const std::string& pod : gpu.pods) add(pod);
        }
      }
    }
    if (scope == EpisodeScope::kGpu) {
      absl::StatusOr<std::vector<std::string>> holding = r_.claims_.PodsHolding(name_, devices);
      if (!holding.ok() && !absl::IsNotFound(holding.status())) {
        return absl::UnavailableError(fmt::format("node {}: cannot tell which pods hold {}: {}",
                                                  name_, RuleList(devices),
                                                  MessageOf(holding.status())));
      }
      if (!options.only.has_value()) options.only.emplace();
      for (const std::string& pod : holding.ok() ? *holding : std::vector<std::string>{}) {
        add(pod);
      }
    }
    return options;
  }

  std::string QuarantineText() const {
    std::vector<std::string> parts;
    if (state_.scope == EpisodeScope::kGpu) {
      parts.push_back(fmt::format("{} quarantined by {}; the node stays in service",
                                  GpuRefsText(state_.gpus), RuleList(state_.devices)));
    } else if (view_.HasTaint(r_.options_.taint_key)) {
      parts.push_back(fmt::format("quarantined (taint {})", r_.options_.taint_key));
    }
    if (state_.node_tainted) {
      parts.push_back(fmt::format("the node tainted {} for the reboot", kRemediationTaint));
    }
    if (state_.cordoned) parts.push_back("cordoned");
    return parts.empty() ? "quarantined" : absl::StrJoin(parts, ", ");
  }

  static std::string RuleList(const std::vector<QuarantinedDevice>& devices) {
    std::vector<std::string> rules;
    for (const QuarantinedDevice& device : devices) {
      rules.push_back(fmt::format("DeviceTaintRule {} ({}/{}/{})", device.rule, device.driver,
                                  device.pool, device.device));
    }
    return absl::StrJoin(rules, ", ");
  }

  static DrainedPod::Outcome DrainedOutcomeOf(DrainPodOutcome outcome) {
    switch (outcome) {
      case DrainPodOutcome::kPending:
        return DrainedPod::Outcome::kPending;
      case DrainPodOutcome::kEvicted:
        return DrainedPod::Outcome::kEvicted;
      case DrainPodOutcome::kGone:
      case DrainPodOutcome::kDeleted:  // done with: never tried again
        return DrainedPod::Outcome::kGone;
      case DrainPodOutcome::kBlocked:
        return DrainedPod::Outcome::kBlocked;
      case DrainPodOutcome::kFailed:
      case DrainPodOutcome::kRetry:
        return DrainedPod::Outcome::kFailed;
    }
    return DrainedPod::Outcome::kFailed;
  }
  static DrainPodOutcome StateOutcomeOf(const DrainedPod& pod) {
    if (pod.unanswered) return DrainPodOutcome::kRetry;
    switch (pod.outcome) {
      case DrainedPod::Outcome::kPending:
      case DrainedPod::Outcome::kWouldEvict:
        return DrainPodOutcome::kPending;
      case DrainedPod::Outcome::kEvicted:
        return DrainPodOutcome::kEvicted;
      case DrainedPod::Outcome::kGone:
        return DrainPodOutcome::kGone;
      case DrainedPod::Outcome::kBlocked:
        return DrainPodOutcome::kBlocked;
      case DrainedPod::Outcome::kFailed:
        return DrainPodOutcome::kFailed;
    }
    return DrainPodOutcome::kFailed;
  }

  Remediator& r_;
  const NodeView& view_;
  const std::string& name_;
  NodeRemediation& state_;
  NodeStep& step_;
  Pass& pass_;
  const absl::Time now_;
  const std::optional<PublishedFaults> faults_;
  const bool failing_, healthy_;
  absl::Status error_;
};

absl::Status Remediator::ReconcileNode(const std::string& name, const Json& node, Pass& pass) {
  const NodeView view = NodeView::From(node);
  const absl::Time now = pass.now;
  NodeRemediation state;
  const std::string before = view.Annotation(kRemediationAnnotation);
  if (!before.empty()) {
    auto parsed = ParseRemediation(before);
    if (!parsed.ok()) {
      // Someone edited it: never act on a state that cannot be read; a person fixes or removes it.
      return absl::InvalidArgumentError(
          fmt::format("node {}: {}; not acting on it until it is fixed or removed", name,
                      MessageOf(parsed.status())));
    }
    state = *std::move(parsed);
  }
  // Attempts older than the window no longer count.
  std::erase_if(state.attempts,
                [&](absl::Time attempt) { return now - attempt > options_.attempt_window; });
  std::optional<PublishedFaults> faults;
  if (const std::string text = view.Annotation(kFaultsAnnotation); !text.empty()) {
    if (auto parsed = ParseFaults(text); parsed.ok()) faults = *std::move(parsed);
  }
  NodeStep step(this, view, now);
  Episode episode(*this, view, state, step, pass, std::move(faults));
  if (const std::optional<Transition> transition = episode.Run()) {
    const std::optional<RemediationStep> next = NextStep(state.step, *transition);
    if (!next.has_value()) {
      spdlog::critical("remediation: node {}: no arrow leaves step {} on {}", name,
                       RemediationStepName(state.step), TransitionName(*transition));
    }
    VIGIL_CHECK(next.has_value());
    state.step = *next;
    state.step_started = now;
  }
  if (!episode.error().ok()) return episode.error();

  // Kept while an episode is under way or attempts count; gone once neither holds.
  if (state.step == RemediationStep::kIdle && state.attempts.empty()) {
    step.RemoveAnnotation(kRemediationAnnotation);
  } else if (const std::string after = RemediationToJson(state); after != before) {
    step.SetAnnotation(kRemediationAnnotation, after);
  }
  absl::Status written = step.Write();
  if (!written.ok()) {
    // Neither the step nor its Events happened: decide (and tell) again next pass.
    waits_.erase(name);
    dry_runs_.erase(name);
  }
  Json status = {{"node", name},
                 {"step", std::string(RemediationStepName(state.step))},
                 {"action", std::string(RecommendedActionText(state.action))},
                 {"scope", std::string(EpisodeScopeName(state.scope))},
                 {"incident", state.incident},
                 {"attempts", state.attempts.size()},
                 {"since", kube::Time(state.step_started)},
                 {"message", state.message},
                 {"condition", view.condition}};
  if (dry_runs_.contains(name)) status["dry_run"] = dry_runs_[name];
  if (auto wait = waits_.find(name); wait != waits_.end()) status["waiting"] = wait->second;
  if (state.step != RemediationStep::kIdle || view.condition == "True" ||
      status.contains("dry_run")) {
    statuses_[name] = std::move(status);
  } else {
    statuses_.erase(name);
  }
  if (state.step != RemediationStep::kIdle) {
    steps_of_[name] = std::string(RemediationStepName(state.step));
  } else {
    steps_of_.erase(name);
  }
  return written;
}

Json Remediator::StatusJson() const {
  absl::MutexLock lock(&status_mutex_);
  return {{"mode", std::string(ModeName(options_.mode))},
          {"breaker_open", stats_.breaker_open.load()},
          {"nodes", status_}};
}

std::string Remediator::Metrics() const {
  std::string out;
  PrometheusText text(&out);
  text.Family("vigil_remediator_nodes", MetricType::kGauge, "GPU nodes by remediation step.");
  {
    absl::MutexLock lock(&status_mutex_);
    for (RemediationStep step :
         {RemediationStep::kIdle, RemediationStep::kDraining, RemediationStep::kDrainStuck,
          RemediationStep::kRecovering, RemediationStep::kVerifying, RemediationStep::kEscalated}) {
      const std::string name(RemediationStepName(step));
      auto it = steps_.find(name);
      text.Sample("vigil_remediator_nodes", {{"step", name}}, it == steps_.end() ? 0 : it->second);
    }
    // One series per node under remediation (not idle): what the alerts name.
    text.Family("vigil_remediator_node_step", MetricType::kGauge,
                "1 for the step a GPU node under remediation is at.");
    for (const Json& node : status_) {
      const std::string step = node.value("step", "");
      if (step == RemediationStepName(RemediationStep::kIdle)) continue;
      text.Sample(
          "vigil_remediator_node_step",
          {{"node", node.value("node", "")}, {"step", step}, {"action", node.value("action", "")}},
          1);
    }
  }
  text.Family("vigil_remediator_evictions_total", MetricType::kCounter,
              "Evictions asked for, by the API server's answer.");
  for (const auto& [outcome, count] :
       {std::pair<std::string_view, uint64_t>{"evicted", stats_.evictions_evicted.load()},
        {"gone", stats_.evictions_gone.load()},
        {"blocked", stats_.evictions_blocked.load()},
        {"failed", stats_.evictions_failed.load()}}) {
    text.Sample("vigil_remediator_evictions_total", {{"outcome", outcome}}, count);
  }
  const auto counter = [&](std::string_view name, std::string_view help, uint64_t value) {
    text.Single(name, MetricType::kCounter, help, value);
  };
  const auto gauge = [&](std::string_view name, std::string_view help, uint64_t value) {
    text.Single(name, MetricType::kGauge, help, value);
  };
  counter("vigil_remediator_episodes_total", "Failing nodes the remediator took on.",
          stats_.episodes.load());
  counter("vigil_remediator_pods_deleted_total",
          "Pods deleted because a PodDisruptionBudget still blocked their eviction "
          "(--force-after).",
          stats_.pods_deleted.load());
  counter("vigil_remediator_resets_requested_total", "GPU resets asked of nodes' health checks.",
          stats_.resets_requested.load());
  counter("vigil_remediator_reboots_requested_total", "Reboots requested.",
          stats_.reboots_requested.load());
  counter("vigil_remediator_recoveries_total", "Nodes handed back after PASS held.",
          stats_.recoveries.load());
  counter("vigil_remediator_failed_attempts_total",
          "Recoveries that failed or were followed by FAIL again.", stats_.failed_attempts.load());
  counter("vigil_remediator_escalations_total", "Nodes labelled vigil.dev/needs-inspection.",
          stats_.escalations.load());
  counter("vigil_remediator_dry_run_steps_total", "Steps recorded but not taken (dry run).",
          stats_.dry_run_steps.load());
  counter("vigil_remediator_api_errors_total", "Failed requests to the API server.",
          stats_.api_errors.load());
  counter("vigil_remediator_conflicts_total",
          "Node writes refused because the node changed since it was read.",
          stats_.conflicts.load());
  gauge("vigil_remediator_circuit_breaker_open",
        "1 while too many GPU nodes are tainted for a new remediation to start.",
        stats_.breaker_open.load() ? 1 : 0);
  gauge("vigil_remediator_taint_breaker_open",
        "1 while the breaker published for the health checks refuses new taints (its ConfigMap "
        "says open).",
        breaker_.stats().open.load() ? 1 : 0);
  gauge("vigil_remediator_taint_breaker_published",
        "1 once this replica has published the breaker.",
        breaker_.stats().published.load() ? 1 : 0);
  counter("vigil_remediator_taint_breaker_writes_total",
          "Writes of the published breaker (it opened or closed, or was renewed).",
          breaker_.stats().writes.load());
  counter("vigil_remediator_taint_breaker_errors_total",
          "Failed reads and writes of the published breaker; retried next pass.",
          breaker_.stats().errors.load());
  gauge("vigil_remediator_gpu_nodes", "GPU nodes the remediator watches.",
        stats_.tracked_nodes.load());
  gauge("vigil_remediator_pass_nodes",
        "Nodes the last pass reconciled (changed, under remediation, or failing).",
        stats_.last_pass_nodes.load());
  counter("vigil_remediator_nodes_reconciled_total", "Node reconciliations, summed over passes.",
          stats_.nodes_reconciled.load());
  counter("vigil_remediator_device_plugin_restarts_total",
          "Device plugin pods deleted after a recovery, for the plugin to offer the GPU again.",
          stats_.device_plugin_restarts.load());
  counter("vigil_remediator_device_taint_rules_collected_total",
          "DeviceTaintRules deleted because the node they quarantine a GPU of no longer exists.",
          stats_.rules_collected.load());
  return out;
}

}  // namespace vigil::remediator
