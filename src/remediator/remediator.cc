// Implements the remediator's per-node state machine (remediator.h).
#include "remediator/remediator.h"

#include <algorithm>
#include <set>

#include "api/convert.h"
#include "common/status.h"
#include "fmt/format.h"
#include "kube/events.h"
#include "kube/object.h"
#include "kube/pods.h"
#include "remediator/drain.h"
#include "spdlog/spdlog.h"

namespace vigil::remediator {
namespace {

using Json = nlohmann::json;

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

std::string GpuList(const std::vector<GpuRef>& gpus) {
  std::string out;
  for (const GpuRef& gpu : gpus) {
    out += fmt::format("{}GPU {} ({})", out.empty() ? "" : ", ", gpu.index, gpu.uuid);
  }
  return out;
}

std::string PodList(const std::vector<DrainPodState>& pods, std::string_view outcome = "") {
  std::string out;
  for (const DrainPodState& pod : pods) {
    if (!outcome.empty() && pod.outcome != outcome) continue;
    out += (out.empty() ? "" : ", ") + pod.id;
  }
  return out.empty() ? "none" : out;
}

DrainedPod::Outcome OutcomeFromName(std::string_view name, bool* unanswered) {
  *unanswered = name == "retry";
  for (DrainedPod::Outcome outcome :
       {DrainedPod::Outcome::kPending, DrainedPod::Outcome::kEvicted, DrainedPod::Outcome::kGone,
        DrainedPod::Outcome::kBlocked, DrainedPod::Outcome::kFailed}) {
    if (OutcomeName(outcome) == name) return outcome;
  }
  return *unanswered ? DrainedPod::Outcome::kFailed : DrainedPod::Outcome::kPending;
}

std::string NameOfOutcome(const DrainedPod& pod) {
  return pod.unanswered ? "retry" : std::string(OutcomeName(pod.outcome));
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
      auto response = remediator_->api_->Call("PATCH", "/api/v1/nodes/" + view_.name, kMergePatch,
                                              patch_.dump());
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

Remediator::Remediator(RemediatorOptions options, KubeApi* api)
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
               api) {
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
    for (std::string_view key : {kNeedsInspectionLabel, kRebootRequestedLabel}) {
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
  return kept;
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
                             kJsonContent, event.dump());
  if (!response.ok() || response->status < 200 || response->status >= 300) {
    ++stats_.api_errors;
    // An Event is a record, not a step: the step stands, the log line above keeps it.
    spdlog::warn("remediation: node {}: could not post the {} Event: {}", view.name, reason,
                 response.ok() ? kube::ApiMessage(response->body)
                               : std::string(MessageOf(response.status())));
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
  }
  if (!node.has_value()) {  // gone from the cluster (or from the selector)
    if (it != tracked_.end()) tracked_.erase(it);
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
  tainted_ += tracked.tainted;
  active_ += tracked.active;
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
  if (absl::Status published = breaker_.Publish(tainted_, tracked_.size(), pass.now);
      !published.ok()) {
    if (MessageOf(published) != breaker_error_) {
      breaker_error_ = std::string(MessageOf(published));
      spdlog::warn("remediation: {}", breaker_error_);
    }
  } else if (!breaker_error_.empty()) {
    spdlog::info("remediation: the circuit breaker is published again");
    breaker_error_.clear();
  }
  pass.active = active_;
  // The health check's breaker, seen cluster-wide: more tainted than it would let be.
  if (tainted_ > MaxTaintedNodes(options_.max_tainted_share, tracked_.size())) {
    pass.breaker_open = true;
    pass.breaker_why = fmt::format("{} of {} GPU nodes are tainted, more than {:.0f}%", tainted_,
                                   tracked_.size(), options_.max_tainted_share * 100);
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

absl::Status Remediator::ReconcileNode(const std::string& name, const Json& node, Pass& pass) {
  const NodeView view = NodeView::From(node);
  const absl::Time now = pass.now;
  NodeRemediation state;
  if (const std::string text = view.Annotation(kRemediationAnnotation); !text.empty()) {
    auto parsed = ParseRemediation(text);
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
  const bool failing = view.condition == "True";
  const bool healthy = view.condition == "False";
  NodeStep step(this, view, now);
  const auto record = [&](RemediationStep next, std::string message) {
    state.step = next;
    state.step_started = now;
    state.message = std::move(message);
  };
  const auto escalate = [&](const std::string& why) {
    record(RemediationStep::kEscalated, why);
    step.SetLabel(kNeedsInspectionLabel, "true");
    step.SetTaint(kNeedsInspectionTaint, true);
    step.RemoveAnnotation(kResetRequestAnnotation);
    step.RemoveAnnotation(kRebootRequestAnnotation);
    step.Event("Warning", "VigilNeedsInspection",
               fmt::format("{}: labelled {}=true and kept quarantined; remove the label to hand "
                           "the node back",
                           why, kNeedsInspectionLabel));
    ++stats_.escalations;
  };
  // The end of an episode: what the remediator added goes, its attempts stay for the window.
  const auto hand_back = [&](const std::string& why) {
    if (state.cordoned) step.SetUnschedulable(false);
    step.RemoveLabel(kRebootRequestedLabel);
    step.RemoveAnnotation(kResetRequestAnnotation);
    step.RemoveAnnotation(kRebootRequestAnnotation);
    state.cordoned = false;
    state.drain.clear();
    state.drain_rounds = 0;
    state.request_id.clear();
    record(RemediationStep::kIdle, why);
  };
  const std::string before = view.Annotation(kRemediationAnnotation);

  // Not --mode on: an episode under way (or an escalation) is frozen where it is — reported,
  // never advanced (a roll-back to dry-run mid-incident changes nothing from then on).
  const bool frozen = options_.mode != Mode::kOn && state.step != RemediationStep::kIdle;
  switch (frozen ? RemediationStep::kIdle : state.step) {
    case RemediationStep::kEscalated:
      if (!view.labels.contains(std::string(kNeedsInspectionLabel))) {
        step.SetTaint(kNeedsInspectionTaint, false);
        hand_back("handed back by a person (the needs-inspection label was removed)");
        state.attempts.clear();
        step.Event("Normal", "VigilHandedBack",
                   fmt::format("the {} label was removed: the remediator's taint is gone and its "
                               "attempts are forgotten",
                               kNeedsInspectionLabel));
      } else {
        step.SetTaint(kNeedsInspectionTaint, true);  // put back if someone took it off alone
      }
      break;

    case RemediationStep::kIdle: {
      if (frozen) {
        const std::string why = fmt::format(
            "frozen at {} (--mode {})", RemediationStepName(state.step), ModeName(options_.mode));
        if (waits_[name] != why) {
          waits_[name] = why;
          spdlog::warn("remediation: node {}: {}: nothing is done until --mode on", name, why);
        }
        break;
      }
      if (!failing || options_.mode == Mode::kOff) {
        dry_runs_.erase(name);
        waits_.erase(name);
        break;
      }
      if (!faults.has_value()) {
        if (waits_[name] != "faults") {
          waits_[name] = "faults";
          spdlog::warn(
              "remediation: node {} fails but its health check has published no {} annotation "
              "(is it a Vigil health check with --kubernetes that publishes faults?): waiting",
              name, kFaultsAnnotation);
        }
        break;
      }
      // What the node needs: the strongest action of its actionable faults.
      v1::RecommendedAction action = v1::RECOMMENDED_ACTION_NONE;
      std::vector<GpuRef> gpus;
      std::string incident;
      bool drill_only = true;
      // A drill's fault without permission drives nothing: only the actionable faults choose
      // the action and the GPUs (the others are dry-run when they are all there is).
      for (const PublishedFault& fault : faults->faults) {
        drill_only &= !fault.actionable();
      }
      for (const PublishedFault& fault : faults->faults) {
        if ((fault.actionable() || drill_only) && Strength(fault.action) > Strength(action)) {
          action = fault.action;
        }
      }
      for (const PublishedFault& fault : faults->faults) {
        if (fault.action != action || !(fault.actionable() || drill_only)) continue;
        if (fault.gpu >= 0 && std::none_of(gpus.begin(), gpus.end(), [&](const GpuRef& gpu) {
              return gpu.uuid == fault.uuid;
            })) {
          gpus.push_back({.index = static_cast<uint32_t>(fault.gpu), .uuid = fault.uuid});
        }
        const std::string subject = fault.gpu >= 0 ? fmt::format("GPU {}", fault.gpu) : "node";
        incident += fmt::format("{}{} {} {}{}", incident.empty() ? "" : "; ", subject, fault.system,
                                fault.code, fault.injected ? " [injected]" : "");
      }
      if (faults->faults.empty() || action == v1::RECOMMENDED_ACTION_NONE) {
        if (waits_[name] != "none") {
          waits_[name] = "none";
          spdlog::info("remediation: node {} fails, but no fault recommends an action", name);
        }
        break;
      }
      // For a reboot, every GPU pod (or every pod); otherwise the pods of the failing GPUs when
      // the health check knows them, else every GPU pod.
      DrainOptions drain_options{
          .all_pods = action == v1::RECOMMENDED_ACTION_REBOOT && options_.drain_all_pods,
          .exclude_namespaces = options_.exclude_namespaces};
      if (action != v1::RECOMMENDED_ACTION_REBOOT && faults->pods_known) {
        drain_options.only.emplace();
        for (const GpuPods& gpu : faults->gpu_pods) {
          for (const GpuRef& failing_gpu : gpus) {
            if (gpu.uuid != failing_gpu.uuid) continue;
            drain_options.only->insert(drain_options.only->end(), gpu.pods.begin(), gpu.pods.end());
          }
        }
      }
      const bool dry_run = options_.mode == Mode::kDryRun || drill_only;
      if (dry_run) {
        // Every step it would take, recorded once per episode; nothing on the node changes.
        const std::string episode = incident + "|" + kube::Time(view.condition_since);
        if (dry_runs_[name] == episode) break;
        dry_runs_[name] = episode;
        const std::string why = drill_only
                                    ? "the faults are a drill's, injected without --allow-actions"
                                    : "--mode dry-run";
        std::vector<std::string> would;
        if (state.attempts.size() >= static_cast<size_t>(options_.max_attempts) ||
            action == v1::RECOMMENDED_ACTION_INSPECT) {
          would.push_back(
              fmt::format("label {}=true and keep the node quarantined", kNeedsInspectionLabel));
        } else {
          if (options_.cordon) would.push_back("cordon the node");
          DrainOptions drain = drain_options;
          drain.dry_run = true;
          const DrainReport plan = PlanDrain(*api_, name, drain);
          std::string pods;
          for (const DrainedPod& pod : plan.pods) {
            pods += fmt::format("{}{}/{}", pods.empty() ? "" : ", ", pod.ns, pod.name);
          }
          would.push_back(plan.error.empty()
                              ? fmt::format("evict {}", pods.empty() ? "no pod" : pods)
                              : fmt::format("evict the pods (cannot list them: {})", plan.error));
          if (action == v1::RECOMMENDED_ACTION_RESET_GPU) {
            would.push_back(fmt::format("reset {}", GpuList(gpus)));
          } else if (action == v1::RECOMMENDED_ACTION_REBOOT) {
            would.push_back(
                fmt::format("request a reboot ({})", RebootViaName(options_.reboot_via)));
          }
          would.push_back(fmt::format("hand the node back after PASS for {}",
                                      absl::FormatDuration(options_.untaint_after)));
        }
        for (size_t i = 0; i < would.size(); ++i) {
          step.Event("Normal", "VigilDryRun",
                     fmt::format("[dry-run: {}] {} ({}): step {} of {}: would {}", why, incident,
                                 RecommendedActionText(action), i + 1, would.size(), would[i]));
          ++stats_.dry_run_steps;
        }
        break;
      }
      dry_runs_.erase(name);
      // A fleet-wide false alarm must neither drain nor label the fleet.
      if (pass.breaker_open) {
        if (waits_[name] != pass.breaker_why) {
          waits_[name] = pass.breaker_why;
          step.Event("Warning", "VigilCircuitBreakerOpen",
                     fmt::format("{} waits: {} — a fleet-wide problem is not drained node by node",
                                 incident, pass.breaker_why));
        }
        break;
      }
      if (state.attempts.size() >= static_cast<size_t>(options_.max_attempts)) {
        state.action = action;
        state.gpus = gpus;
        state.incident = incident;
        escalate(fmt::format("failed again after {} recover{} in {}: {}", state.attempts.size(),
                             state.attempts.size() == 1 ? "y" : "ies",
                             absl::FormatDuration(options_.attempt_window), incident));
        break;
      }
      if (action == v1::RECOMMENDED_ACTION_INSPECT) {
        state.action = action;
        state.gpus = gpus;
        state.incident = incident;
        escalate(fmt::format("the fault needs a person, not an automatic action: {}", incident));
        break;
      }
      if (pass.active >= options_.max_concurrent) {
        const std::string why =
            fmt::format("{} node(s) already in drain or recovery (--max-concurrent {})",
                        pass.active, options_.max_concurrent);
        if (waits_[name] != why) {
          waits_[name] = why;
          step.Event("Normal", "VigilWaiting", fmt::format("{} waits: {}", incident, why));
        }
        break;
      }
      if (!view.HasTaint(options_.taint_key) && !options_.cordon) {
        const std::string why = fmt::format(
            "the node is not quarantined: no {} taint yet (does its health check run with "
            "--taint?) and no --cordon",
            options_.taint_key);
        if (waits_[name] != why) {
          waits_[name] = why;
          spdlog::warn("remediation: node {}: {}: not draining", name, why);
        }
        break;
      }
      waits_.erase(name);
      // Quarantine (the health check's taint is on; cordon as an option), then the drain plan.
      state.action = action;
      state.gpus = gpus;
      state.incident = incident;
      state.episode_started = now;
      if (options_.cordon && !view.unschedulable) {
        step.SetUnschedulable(true);
        state.cordoned = true;
      }
      const DrainReport plan = PlanDrain(*api_, name, drain_options);
      if (!plan.error.empty()) {
        return absl::UnavailableError(
            fmt::format("node {}: cannot list its pods to drain: {}", name, plan.error));
      }
      state.drain.clear();
      for (const DrainedPod& pod : plan.pods) {
        state.drain.push_back({.id = pod.ns + "/" + pod.name, .outcome = "pending"});
      }
      state.drain_rounds = 0;
      state.drain_next = now;
      record(RemediationStep::kDraining, fmt::format("evicting {}", PodList(state.drain)));
      ++stats_.episodes;
      ++pass.active;
      step.Event("Warning", "VigilQuarantined",
                 fmt::format("{} ({}): quarantined (taint {}{}); draining {}", incident,
                             RecommendedActionText(action), options_.taint_key,
                             state.cordoned ? ", cordoned" : "", PodList(state.drain)));
      break;
    }

    case RemediationStep::kDraining: {
      if (now >= state.drain_next) {
        std::vector<DrainedPod> pods;
        for (const DrainPodState& pod : state.drain) {
          const size_t slash = pod.id.find('/');
          DrainedPod drained{.ns = pod.id.substr(0, slash),
                             .name = slash == std::string::npos ? "" : pod.id.substr(slash + 1),
                             .attempts = pod.attempts};
          drained.outcome = OutcomeFromName(pod.outcome, &drained.unanswered);
          pods.push_back(std::move(drained));
        }
        std::vector<DrainedPod> before_round = pods;
        absl::Duration retry_after;
        EvictRound(*api_, &pods, &retry_after);
        ++state.drain_rounds;
        state.drain_next = NextRoundAfter(now, state.drain_rounds, retry_after);
        for (size_t i = 0; i < pods.size(); ++i) {
          if (pods[i].attempts == before_round[i].attempts) continue;
          switch (pods[i].outcome) {
            case DrainedPod::Outcome::kEvicted:
              ++stats_.evictions_evicted;
              break;
            case DrainedPod::Outcome::kGone:
              ++stats_.evictions_gone;
              break;
            case DrainedPod::Outcome::kBlocked:
              ++stats_.evictions_blocked;
              break;
            default:
              ++stats_.evictions_failed;
              break;
          }
          state.drain[i].outcome = NameOfOutcome(pods[i]);
          state.drain[i].attempts = pods[i].attempts;
        }
      }
      // The last resort, when configured: what a PodDisruptionBudget still holds is deleted.
      if (options_.force_after.has_value() && now - state.step_started >= *options_.force_after) {
        std::string deleted;
        for (DrainPodState& pod : state.drain) {
          if (pod.outcome != "blocked") continue;
          const size_t slash = pod.id.find('/');
          auto gone = kube::DeletePod(*api_, pod.id.substr(0, slash),
                                      slash == std::string::npos ? "" : pod.id.substr(slash + 1));
          if (!gone.ok()) {
            spdlog::warn("remediation: node {}: {}", name, MessageOf(gone.status()));
            continue;
          }
          pod.outcome = *gone ? "deleted" : "gone";
          ++stats_.pods_deleted;
          deleted += (deleted.empty() ? "" : ", ") + pod.id;
        }
        if (!deleted.empty()) {
          step.Event(
              "Warning", "VigilPodsDeleted",
              fmt::format("{}: deleted {}: a PodDisruptionBudget still blocked its "
                          "eviction after {} (--force-after)",
                          state.incident, deleted, absl::FormatDuration(*options_.force_after)));
        }
      }
      const bool drained =
          std::all_of(state.drain.begin(), state.drain.end(), [](const DrainPodState& pod) {
            return pod.outcome == "evicted" || pod.outcome == "gone" || pod.outcome == "deleted";
          });
      if (drained) {
        step.Event("Normal", "VigilDrained",
                   fmt::format("{}: drained (evicted: {})", state.incident, PodList(state.drain)));
        record(RemediationStep::kRecovering, "drained; recovering");
        state.request_id.clear();
      } else if (now - state.step_started >= options_.drain_timeout) {
        std::string left;
        for (const DrainPodState& pod : state.drain) {
          if (pod.outcome == "evicted" || pod.outcome == "gone") continue;
          left += fmt::format("{}{} ({}, {} attempts)", left.empty() ? "" : ", ", pod.id,
                              pod.outcome, pod.attempts);
        }
        record(RemediationStep::kDrainStuck,
               fmt::format("the drain did not finish in {}: {} left",
                           absl::FormatDuration(options_.drain_timeout), left));
        step.Event("Warning", "VigilDrainStuck",
                   fmt::format("{}: {}; stopped, the node stays quarantined (a person decides: "
                               "fix the PodDisruptionBudget or move the pods)",
                               state.incident, state.message));
      }
      break;
    }

    case RemediationStep::kDrainStuck:
      if (healthy && now - view.condition_since >= options_.untaint_after) {
        hand_back("healthy again after a stuck drain");
        step.Event("Normal", "VigilRecovered",
                   fmt::format("{}: PASS for {} after the drain got stuck; handed back",
                               state.incident, absl::FormatDuration(options_.untaint_after)));
      }
      break;

    case RemediationStep::kRecovering: {
      // restart-app recovers like reset-gpu: its workloads are drained (they restart
      // elsewhere), and a reset of the now idle GPU ends its sticky FAIL.
      if (state.action == v1::RECOMMENDED_ACTION_RESET_GPU ||
          state.action == v1::RECOMMENDED_ACTION_RESTART_APP) {
        if (state.gpus.empty()) {
          escalate(fmt::format(
              "{} recommends a GPU reset, but names no GPU (a node-level fault): a person "
              "decides what to reset",
              state.incident));
          break;
        }
        if (state.request_id.empty()) {
          const ActionRequest request{
              .id = fmt::format("reset-{}-{:x}-{}", name, absl::ToUnixSeconds(now), ++written_),
              .gpus = state.gpus,
              .reason = fmt::format("vigil remediator: {}", state.incident),
              .requested = now};
          step.SetAnnotation(kResetRequestAnnotation, RequestToJson(request));
          state.request_id = request.id;
          state.message =
              fmt::format("asked the node's health check to reset {}", GpuList(state.gpus));
          ++stats_.resets_requested;
          step.Event("Normal", "VigilResetRequested",
                     fmt::format("{}: reset of {} requested ({})", state.incident,
                                 GpuList(state.gpus), request.id));
          break;
        }
        auto result = ParseResult(view.Annotation(kResetResultAnnotation));
        if (result.ok() && result->id == state.request_id) {
          if (result->outcome == ActionOutcome::kDone) {
            state.attempts.push_back(now);
            record(RemediationStep::kVerifying,
                   fmt::format("reset done; verifying PASS for {}",
                               absl::FormatDuration(options_.untaint_after)));
            step.RemoveAnnotation(kResetRequestAnnotation);
            step.Event("Normal", "VigilGpuReset",
                       fmt::format("{}: {} reset: {}", state.incident, GpuList(state.gpus),
                                   result->message));
            break;
          }
          if (result->outcome == ActionOutcome::kRefused &&
              now - state.step_started < options_.recovery_timeout) {
            if (now - result->finished >= kRefusedResetRetry) state.request_id.clear();
            state.message = fmt::format("the reset was refused, asking again: {}", result->message);
            break;
          }
          state.attempts.push_back(now);
          ++stats_.failed_attempts;
          escalate(fmt::format(
              "the reset of {} {}: {}", GpuList(state.gpus),
              result->outcome == ActionOutcome::kRefused ? "kept being refused" : "failed",
              result->message));
          break;
        }
        if (now - state.step_started >= options_.recovery_timeout) {
          escalate(fmt::format(
              "no answer to the reset request {} from the node's health check in {} (does it "
              "run with --relay-actions and the engine's token?)",
              state.request_id, absl::FormatDuration(options_.recovery_timeout)));
        }
        break;
      }
      if (state.action == v1::RECOMMENDED_ACTION_REBOOT) {
        if (state.request_id.empty()) {
          state.request_id =
              fmt::format("reboot-{}-{:x}-{}", name, absl::ToUnixSeconds(now), ++written_);
          state.attempts.push_back(now);
          ++stats_.reboots_requested;
          const std::string reason = fmt::format("vigil remediator: {}", state.incident);
          switch (options_.reboot_via) {
            case RebootVia::kSentinel:
              step.SetAnnotation(
                  kRebootRequestAnnotation,
                  RequestToJson({.id = state.request_id, .reason = reason, .requested = now}));
              state.message = "asked the node's health check for the reboot sentinel";
              break;
            case RebootVia::kLabel:
              step.SetLabel(kRebootRequestedLabel, "true");
              state.message =
                  fmt::format("labelled {}=true for the repair operator", kRebootRequestedLabel);
              break;
            case RebootVia::kNone:
              state.message = "a reboot is needed: no --reboot-via, so a person reboots it";
              break;
          }
          step.Event("Warning", "VigilRebootRequested",
                     fmt::format("{}: {} ({})", state.incident, state.message, state.request_id));
          break;
        }
        if (healthy && view.condition_since >=
                           absl::FromUnixSeconds(absl::ToUnixSeconds(state.step_started))) {
          step.RemoveLabel(kRebootRequestedLabel);
          step.RemoveAnnotation(kRebootRequestAnnotation);
          record(RemediationStep::kVerifying,
                 fmt::format("back after the reboot; verifying PASS for {}",
                             absl::FormatDuration(options_.untaint_after)));
          break;
        }
        if (auto result = ParseResult(view.Annotation(kRebootResultAnnotation));
            result.ok() && result->id == state.request_id &&
            result->outcome == ActionOutcome::kFailed) {
          ++stats_.failed_attempts;
          escalate(fmt::format("the reboot could not be requested: {}", result->message));
          break;
        }
        if (now - state.step_started >= options_.recovery_timeout) {
          ++stats_.failed_attempts;
          escalate(fmt::format("not back to PASS {} after the reboot was requested",
                               absl::FormatDuration(options_.recovery_timeout)));
        }
        break;
      }
      break;
    }

    case RemediationStep::kVerifying: {
      // The condition the recovery started from may still say FAIL for a tick or two (the engine
      // sees the reset at its next read, the health check writes after that): only a transition
      // to FAIL since the recovery (or a FAIL that outlasts --recovery-timeout) is a failed
      // attempt. lastTransitionTime has second precision.
      const bool failed_again =
          failing &&
          (view.condition_since >= absl::FromUnixSeconds(absl::ToUnixSeconds(state.step_started)) ||
           now - state.step_started >= options_.recovery_timeout);
      if (failed_again) {
        ++stats_.failed_attempts;
        if (state.attempts.size() >= static_cast<size_t>(options_.max_attempts)) {
          escalate(fmt::format("FAIL again after {} recover{} in {}: {}", state.attempts.size(),
                               state.attempts.size() == 1 ? "y" : "ies",
                               absl::FormatDuration(options_.attempt_window), state.incident));
        } else {
          // A failed attempt: the episode starts over from the top next pass.
          hand_back("FAIL again after the recovery: a failed attempt; starting over");
          step.Event("Warning", "VigilRecoveryFailed",
                     fmt::format("{}: FAIL again after the recovery (attempt {} of {})",
                                 state.incident, state.attempts.size(), options_.max_attempts));
        }
        break;
      }
      if (healthy &&
          now - std::max(state.step_started, view.condition_since) >= options_.untaint_after &&
          !view.HasTaint(options_.taint_key)) {
        hand_back(
            fmt::format("recovered: PASS for {}", absl::FormatDuration(options_.untaint_after)));
        ++stats_.recoveries;
        step.Event("Normal", "VigilRecovered",
                   fmt::format("{}: PASS for {} after the {}; handed back", state.incident,
                               absl::FormatDuration(options_.untaint_after),
                               RecommendedActionText(state.action)));
      }
      break;
    }
  }

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
                 {"incident", state.incident},
                 {"attempts", state.attempts.size()},
                 {"since", kube::Time(state.step_started)},
                 {"message", state.message},
                 {"condition", view.condition}};
  if (dry_runs_.contains(name)) status["dry_run"] = dry_runs_[name];
  if (auto wait = waits_.find(name); wait != waits_.end()) status["waiting"] = wait->second;
  if (state.step != RemediationStep::kIdle || failing || status.contains("dry_run")) {
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
  out +=
      "# HELP vigil_remediator_nodes GPU nodes by remediation step.\n"
      "# TYPE vigil_remediator_nodes gauge\n";
  {
    absl::MutexLock lock(&status_mutex_);
    for (RemediationStep step :
         {RemediationStep::kIdle, RemediationStep::kDraining, RemediationStep::kDrainStuck,
          RemediationStep::kRecovering, RemediationStep::kVerifying, RemediationStep::kEscalated}) {
      const std::string name(RemediationStepName(step));
      auto it = steps_.find(name);
      out += fmt::format("vigil_remediator_nodes{{step=\"{}\"}} {}\n", name,
                         it == steps_.end() ? 0 : it->second);
    }
    // One series per node under remediation (not idle): what the alerts name.
    out +=
        "# HELP vigil_remediator_node_step 1 for the step a GPU node under remediation is at.\n"
        "# TYPE vigil_remediator_node_step gauge\n";
    for (const Json& node : status_) {
      const std::string step = node.value("step", "");
      if (step == RemediationStepName(RemediationStep::kIdle)) continue;
      out += fmt::format("vigil_remediator_node_step{{node=\"{}\",step=\"{}\",action=\"{}\"}} 1\n",
                         node.value("node", ""), step, node.value("action", ""));
    }
  }
  const auto counter = [&](std::string_view name, std::string_view help, uint64_t value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, value);
  };
  out +=
      "# HELP vigil_remediator_evictions_total Evictions asked for, by the API server's answer.\n"
      "# TYPE vigil_remediator_evictions_total counter\n";
  out += fmt::format("vigil_remediator_evictions_total{{outcome=\"evicted\"}} {}\n",
                     stats_.evictions_evicted.load());
  out += fmt::format("vigil_remediator_evictions_total{{outcome=\"gone\"}} {}\n",
                     stats_.evictions_gone.load());
  out += fmt::format("vigil_remediator_evictions_total{{outcome=\"blocked\"}} {}\n",
                     stats_.evictions_blocked.load());
  out += fmt::format("vigil_remediator_evictions_total{{outcome=\"failed\"}} {}\n",
                     stats_.evictions_failed.load());
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
  out += fmt::format(
      "# HELP vigil_remediator_circuit_breaker_open 1 while too many GPU nodes are tainted for a "
      "new remediation to start.\n# TYPE vigil_remediator_circuit_breaker_open gauge\n"
      "vigil_remediator_circuit_breaker_open {}\n",
      stats_.breaker_open.load() ? 1 : 0);
  out += fmt::format(
      "# HELP vigil_remediator_taint_breaker_open 1 while the breaker published for the health "
      "checks refuses new taints (its ConfigMap says open).\n"
      "# TYPE vigil_remediator_taint_breaker_open gauge\nvigil_remediator_taint_breaker_open {}\n"
      "# HELP vigil_remediator_taint_breaker_published 1 once this replica has published the "
      "breaker.\n# TYPE vigil_remediator_taint_breaker_published gauge\n"
      "vigil_remediator_taint_breaker_published {}\n",
      breaker_.stats().open.load() ? 1 : 0, breaker_.stats().published.load() ? 1 : 0);
  counter("vigil_remediator_taint_breaker_writes_total",
          "Writes of the published breaker (it opened or closed, or was renewed).",
          breaker_.stats().writes.load());
  counter("vigil_remediator_taint_breaker_errors_total",
          "Failed reads and writes of the published breaker; retried next pass.",
          breaker_.stats().errors.load());
  out += fmt::format(
      "# HELP vigil_remediator_gpu_nodes GPU nodes the remediator watches.\n"
      "# TYPE vigil_remediator_gpu_nodes gauge\nvigil_remediator_gpu_nodes {}\n"
      "# HELP vigil_remediator_pass_nodes Nodes the last pass reconciled (changed, under "
      "remediation, or failing).\n# TYPE vigil_remediator_pass_nodes gauge\n"
      "vigil_remediator_pass_nodes {}\n",
      stats_.tracked_nodes.load(), stats_.last_pass_nodes.load());
  counter("vigil_remediator_nodes_reconciled_total", "Node reconciliations, summed over passes.",
          stats_.nodes_reconciled.load());
  return out;
}

}  // namespace vigil::remediator
