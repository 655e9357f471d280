// Implements the node reporter: reads the Node, patches its GpuProblem condition, posts Events and
// manages the taint with resourceVersion-tested JSON patches.
#include "healthcheck/node_reporter.h"

#include <algorithm>
#include <cmath>

#include "api/remediation.h"
#include "common/backoff.h"
#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "kube/events.h"
#include "kube/object.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

using kube::At;
using kube::StringAt;

using Json = nlohmann::json;

constexpr std::string_view kJsonPatch = "application/json-patch+json";

// A JSON pointer token for a map key ("vigil.dev/taint-owner" -> "vigil.dev~1taint-owner").
std::string PointerToken(std::string_view key) {
  std::string token;
  for (char c : key) {
    if (c == '~') {
      token += "~0";
    } else if (c == '/') {
      token += "~1";
    } else {
      token += c;
    }
  }
  return token;
}

}  // namespace

NodeReporter::NodeReporter(NodeReporterOptions options, kube::KubeApi* api, Clock* clock,
                           DesiredSource desired)
    : options_(std::move(options)),
      api_(api),
      clock_(clock),
      desired_(std::move(desired)),
      node_(api, kube::InformerOptions{.path = "/api/v1/nodes",
                                       .field_selector = "metadata.name=" + options_.node_name,
                                       .transform = KeepWhatTheReporterReads,
                                       .description = fmt::format("node {}", options_.node_name),
                                       .clock = clock}),
      breaker_(TaintBreakerOptions{.node_name = options_.node_name,
                                   .taint_key = options_.taint_key,
                                   .max_tainted_share = options_.max_tainted_share,
                                   .gpu_node_selector = options_.gpu_node_selector,
                                   .breaker_namespace = options_.breaker_namespace,
                                   .breaker_name = options_.breaker_name,
                                   .clock = clock},
               api) {
  // A change of this node by someone else (an admin removing the taint, the kubelet, the
  // remediator's requests): look now.
  node_.AddListener([this](const std::string&) { Wake(); });
}

NodeReporter::~NodeReporter() { Stop(); }

Json NodeReporter::KeepWhatTheReporterReads(const Json& node) {
  const Json& metadata = At(node, "metadata");
  Json kept = {{"metadata",
                {{"name", StringAt(metadata, "name")},
                 {"uid", StringAt(metadata, "uid")},
                 {"resourceVersion", StringAt(metadata, "resourceVersion")}}}};
  if (const Json& annotations = At(metadata, "annotations"); annotations.is_object()) {
    Json& ours = kept["metadata"]["annotations"] = Json::object();
    if (const std::string owner = StringAt(annotations, kTaintOwnerAnnotation); !owner.empty()) {
      ours[std::string(kTaintOwnerAnnotation)] = owner;
    }
    // Remediation's hand-off, for the relay (remediation_relay.h): small, and only on nodes
    // under remediation.
    for (std::string_view key : {kFaultsAnnotation, kResetRequestAnnotation, kResetResultAnnotation,
                                 kRebootRequestAnnotation, kRebootResultAnnotation}) {
      if (const std::string value = StringAt(annotations, key); !value.empty()) {
        ours[std::string(key)] = value;
      }
    }
  }
  // The whole spec (taints, podCIDR, providerID, unschedulable: small, and what a taint patch
  // tests).
  if (const Json& spec = At(node, "spec"); spec.is_object()) kept["spec"] = spec;
  const Json& conditions = At(At(node, "status"), "conditions");
  if (conditions.is_array()) {
    for (const Json& condition : conditions) {
      if (StringAt(condition, "type") == kConditionType) {
        kept["status"]["conditions"] = Json::array({condition});
      }
    }
  }
  return kept;
}

void NodeReporter::StartWatching() {
  node_.Start();
  if (options_.taint) breaker_.Start();
}

void NodeReporter::Wake() {
  absl::MutexLock lock(&mutex_);
  dirty_ = true;
}

void NodeReporter::Start() {
  StartWatching();
  thread_ = StartNamedThread("vigil-kube", [this] { Loop(); });
}

void NodeReporter::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  breaker_.Stop();
  node_.Stop();
}

void NodeReporter::Loop() {
  // API trouble is retried from 1 s up to a minute apart: fast enough to follow a verdict, slow
  // enough not to add load to an API server that is already struggling.
  Backoff backoff(BackoffPolicy{.initial = absl::Seconds(1), .max = absl::Minutes(1)});
  absl::Duration wait = absl::ZeroDuration();
  bool failing = false;
  std::string last_error;
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      if (failing) {
        // Backing off: a new verdict does not cut the wait short, only Stop() does.
        clock_->AwaitWithTimeout(&mutex_, absl::Condition(&stopping_), wait);
      } else {
        auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return dirty_ || stopping_; };
        clock_->AwaitWithTimeout(&mutex_, absl::Condition(&woken), wait);
      }
      if (stopping_) return;
      dirty_ = false;
    }
    const absl::Status status = ReconcileOnce();
    if (status.ok()) {
      if (failing)
        spdlog::info("kubernetes: the API server answers again; node {} is up to date",
                     options_.node_name);
      failing = false;
      last_error.clear();
      backoff.Reset();
      wait = absl::Seconds(1);  // time-driven work: heartbeat, hysteresis, grace periods
      continue;
    }
    failing = true;
    // At least what the API server asked for (a 429 from API Priority and Fairness).
    wait = std::max(backoff.Next(), retry_after_);
    retry_after_ = absl::ZeroDuration();
    const std::string error(MessageOf(status));
    if (error != last_error) {
      spdlog::warn("kubernetes: {}; retrying (backing off up to 1m)", error);
      last_error = error;
    }
  }
}

absl::Status NodeReporter::ReconcileOnce() {
  const absl::Time now = clock_->Now();
  const DesiredNodeState wanted = desired_(now);
  const std::optional<DesiredCondition>& desired = wanted.condition;
  if (!node_known_) {
    if (absl::Status read = ReadNode(); !read.ok()) return read;
  } else if (const std::string cached = node_.ResourceVersionOf(options_.node_name);
             kube::IsLaterResourceVersion(cached, resource_version_)) {
    // Changed by someone else since we last wrote it (copied only then: this runs every pass).
    if (const std::optional<Json> node = node_.Get(options_.node_name)) LearnNode(*node);
  }
  if (!desired.has_value()) return absl::OkStatus();
  // An Event not posted yet for a status the verdict has left since (an outage during which it
  // changed back) is not posted: the node never carried that status.
  if (pending_event_.has_value() && pending_event_->condition.status != desired->status) {
    pending_event_.reset();
  }
  const bool transition = !on_node_.has_value() || on_node_->status != desired->status;
  // Written on a change of what the condition says (status, reason, the failing GPUs and
  // systems), and at the heartbeat; a new seq or figure in the message waits for either.
  const bool changed =
      transition || on_node_->reason != desired->reason || written_identity_ != desired->identity;
  if (changed || now - condition_written_ >= options_.heartbeat) {
    // The transition's Event is due from before the write: a write the server applied but whose
    // answer was lost shows up as the node's status (from the watch) and is no transition then.
    if (transition) {
      if (!pending_event_.has_value()) pending_event_.emplace();
      pending_event_->condition = *desired;
    }
    if (absl::Status patched = PatchCondition(*desired, changed, now); !patched.ok()) {
      return patched;
    }
    written_identity_ = desired->identity;
  }
  if (pending_event_.has_value()) {
    if (absl::Status posted = PostEvent(*pending_event_, now); !posted.ok()) return posted;
    pending_event_.reset();
  }
  // The faults annotation, when it differs from what the node carries: with the taint change of
  // this pass when there is one (one write), else on its own.
  std::optional<std::string> faults;
  if (const std::optional<PublishedFaults>& published = wanted.faults;
      published.has_value() && FaultsIdentity(*published) != faults_on_node_) {
    faults = published->faults.empty() ? "" : FaultsToJson(*published);
  }
  const absl::Status tainted =
      options_.taint ? ReconcileTaint(*desired, now, &faults) : absl::OkStatus();
  // Faults not carried by a taint patch go alone — also when the taint could not be decided or
  // written this pass: the remediator's view of the faults does not wait on the breaker.
  if (faults.has_value()) {
    if (absl::Status published = PatchFaults(*faults); !published.ok() && tainted.ok()) {
      return published;
    }
  }
  return tainted;
}

absl::StatusOr<Json> NodeReporter::Check(const absl::StatusOr<kube::KubeResponse>& response,
                                         std::string_view what) {
  if (!response.ok()) {
    ++stats_.api_errors;
    return absl::UnavailableError(fmt::format("{}: {}", what, MessageOf(response.status())));
  }
  const int code = response->status;
  if (code >= 200 && code < 300) {
    Json body = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      ++stats_.api_errors;
      return absl::DataLossError(fmt::format("{}: the API server's answer is not JSON", what));
    }
    return body;
  }
  ++stats_.api_errors;
  const std::string message = kube::ApiMessage(response->body);
  if (code == 409 || code == 422) {
    // The node changed under us (or a resourceVersion test failed): re-read it and try again.
    ++stats_.conflicts;
    node_known_ = false;
    return absl::AbortedError(fmt::format("{}: conflict ({}): {}", what, code, message));
  }
  if (code == 429) {
    retry_after_ = response->retry_after;
    return absl::UnavailableError(fmt::format(
        "{}: 429 the API server asks to slow down{}: {}", what,
        response->retry_after > absl::ZeroDuration()
            ? fmt::format(" (retry after {})", absl::FormatDuration(response->retry_after))
            : "",
        message));
  }
  if (code == 401 || code == 403) {
    return absl::PermissionDeniedError(fmt::format(
        "{}: {} {}: does the service account have the ClusterRole from deploy/ (nodes get, "
        "list, watch and patch, nodes/status patch, events create and patch)?",
        what, code, message));
  }
  if (code == 404) {
    return absl::NotFoundError(fmt::format(
        "{}: 404 {}: is --node-name (or NODE_NAME) this pod's spec.nodeName?", what, message));
  }
  return absl::UnavailableError(fmt::format("{}: {} {}", what, code, message));
}

void NodeReporter::LearnNode(const Json& node) {
  const Json& metadata = At(node, "metadata");
  resource_version_ = StringAt(metadata, "resourceVersion");
  uid_ = StringAt(metadata, "uid");
  const Json& annotations = At(metadata, "annotations");
  has_annotations_ = annotations.is_object();
  const bool owner_annotation = StringAt(annotations, kTaintOwnerAnnotation) == options_.taint_key;
  const Json& taints = At(At(node, "spec"), "taints");
  has_taints_ = taints.is_array();
  taint_index_ = -1;
  for (size_t i = 0; has_taints_ && i < taints.size(); ++i) {
    if (StringAt(taints[i], "key") == options_.taint_key &&
        StringAt(taints[i], "effect") == "NoSchedule") {
      taint_index_ = static_cast<int>(i);
      break;
    }
  }
  has_taint_ = taint_index_ >= 0;
  owns_taint_ = has_taint_ && owner_annotation;
  stats_.tainted = has_taint_;
  spec_ = At(node, "spec");
  if (const std::string faults = StringAt(annotations, kFaultsAnnotation); faults.empty()) {
    faults_on_node_.clear();
  } else {
    auto parsed = ParseFaults(faults);
    faults_on_node_ = parsed.ok() ? FaultsIdentity(*parsed) : "?";
  }
  on_node_.reset();
  const Json& conditions = At(At(node, "status"), "conditions");
  for (size_t i = 0; conditions.is_array() && i < conditions.size(); ++i) {
    const Json& condition = conditions[i];
    if (StringAt(condition, "type") != kConditionType) continue;
    on_node_ = DesiredCondition{.status = StringAt(condition, "status"),
                                .reason = StringAt(condition, "reason"),
                                .message = StringAt(condition, "message")};
  }
  node_known_ = true;
}

absl::Status NodeReporter::ReadNode() {
  auto node = Check(api_->Call("GET", "/api/v1/nodes/" + options_.node_name, "", ""),
                    fmt::format("reading node {}", options_.node_name));
  if (!node.ok()) return node.status();
  LearnNode(*node);
  return absl::OkStatus();
}

absl::Status NodeReporter::PatchCondition(const DesiredCondition& desired, bool changed,
                                          absl::Time now) {
  Json condition = {{"type", kConditionType},
                    {"status", desired.status},
                    {"reason", desired.reason},
                    {"message", desired.message},
                    {"lastHeartbeatTime", kube::Time(now)}};
  // Left out, a strategic merge keeps the node's lastTransitionTime: it moves only on a change.
  if (!on_node_.has_value() || on_node_->status != desired.status) {
    condition["lastTransitionTime"] = kube::Time(now);
  }
  const Json patch = {{"status", {{"conditions", Json::array({condition})}}}};
  auto node = Check(
      api_->Call("PATCH", "/api/v1/nodes/" + options_.node_name + "/status",
                 kube::kStrategicMergePatch, patch.dump()),
      fmt::format("patching the {} condition of node {}", kConditionType, options_.node_name));
  if (!node.ok()) return node.status();
  if (changed) {
    spdlog::info("kubernetes: node {} condition {}={} ({}): {}", options_.node_name, kConditionType,
                 desired.status, desired.reason, desired.message);
  }
  LearnNode(*node);
  condition_written_ = now;
  ++stats_.condition_updates;
  return absl::OkStatus();
}

absl::Status NodeReporter::PostEvent(PendingEvent& pending, absl::Time now) {
  const DesiredCondition& desired = pending.condition;
  const std::string time = kube::Time(now);
  const std::string type = desired.status == "False" ? "Normal" : "Warning";
  const std::string message =
      fmt::format("{} is {}: {}", kConditionType, desired.status, desired.message);
  while (!event_writes_.empty() && now - event_writes_.front() >= kEventSeriesWindow) {
    event_writes_.pop_front();
  }
  if (event_writes_.size() >= kEventBurst) {
    ++stats_.events_suppressed;
    if (!suppressing_) {
      spdlog::warn(
          "kubernetes: not posting more Events for node {}: {} in the last {} (the condition "
          "itself stays up to date)",
          options_.node_name, event_writes_.size(), absl::FormatDuration(kEventSeriesWindow));
      suppressing_ = true;
    }
    return absl::OkStatus();
  }
  suppressing_ = false;
  const std::string series_key = type + "/" + desired.reason;
  if (auto it = recent_events_.find(series_key);
      it != recent_events_.end() && now - it->second.last < kEventSeriesWindow) {
    // A repeat: update the series.
    const Json patch = {
        {"count", it->second.count + 1}, {"lastTimestamp", time}, {"message", message}};
    auto response = api_->Call(
        "PATCH", "/api/v1/namespaces/" + options_.event_namespace + "/events/" + it->second.name,
        kube::kStrategicMergePatch, patch.dump());
    if (response.ok() && response->status == 404) {
      recent_events_.erase(it);  // expired on the server (Events live an hour): a new one below
    } else {
      auto updated =
          Check(response, fmt::format("updating an Event of node {}", options_.node_name));
      if (!updated.ok()) return updated.status();
      ++it->second.count;
      it->second.last = now;
      event_writes_.push_back(now);
      ++stats_.events;
      return absl::OkStatus();
    }
  }
  // Named once per pending Event, so a retry after a lost answer meets its own object (409).
  if (pending.name.empty()) {
    pending.name =
        fmt::format("{}.{:x}.{}", options_.node_name, absl::ToUnixNanos(now), ++events_posted_);
  }
  const Json event = kube::NodeEvent({.name = pending.name,
                                      .ns = options_.event_namespace,
                                      .node = options_.node_name,
                                      .node_uid = uid_,
                                      .type = type,
                                      .reason = desired.reason,
                                      .message = message,
                                      .component = "vigil-healthcheck",
                                      .instance = options_.node_name,
                                      .time = now});
  const auto response =
      api_->Call("POST", "/api/v1/namespaces/" + options_.event_namespace + "/events",
                 kube::kJsonContent, event.dump());
  // 409 AlreadyExists: an earlier try was created although its answer was lost.
  if (!response.ok() || response->status != 409) {
    auto created = Check(response, fmt::format("posting an Event for node {}", options_.node_name));
    if (!created.ok()) return created.status();
  }
  recent_events_[series_key] = {.name = event["metadata"]["name"], .count = 1, .last = now};
  event_writes_.push_back(now);
  ++stats_.events;
  return absl::OkStatus();
}

absl::Status NodeReporter::ReconcileTaint(const DesiredCondition& desired, absl::Time now,
                                          std::optional<std::string>* faults) {
  // A GPU that a DeviceTaintRule takes out of service alone leaves the node in service.
  const bool node_fine =
      desired.status == "False" || (desired.status == "True" && !desired.node_taint);
  if (!node_fine) healthy_since_ = absl::InfinitePast();
  if (desired.status == "True" && desired.node_taint) {
    if (!desired.actionable) {
      if (!withholding_) {
        ++stats_.taints_withheld;
        spdlog::info(
            "kubernetes: would taint node {}, but every failure is a drill's injected "
            "without --allow-actions: not tainting",
            options_.node_name);
      }
      withholding_ = true;
      return absl::OkStatus();
    }
    withholding_ = false;
    if (has_taint_) return absl::OkStatus();
    auto allowed = TaintAllowed();
    if (!allowed.ok()) return allowed.status();
    if (!*allowed) return absl::OkStatus();
    return AddTaint(now, faults);
  }
  withholding_ = false;
  if (!node_fine) return absl::OkStatus();  // Unknown: neither add nor remove
  refusing_ = false;
  if (healthy_since_ == absl::InfinitePast()) healthy_since_ = now;
  if (!has_taint_ || !owns_taint_) return absl::OkStatus();  // never remove someone else's
  if (now - healthy_since_ < options_.untaint_after) return absl::OkStatus();
  return RemoveTaint(faults);
}

absl::StatusOr<bool> NodeReporter::TaintAllowed() {
  auto decision = breaker_.Decide();
  if (!decision.ok()) return decision.status();
  if (decision->allowed) {
    refusing_ = false;
    return true;
  }
  ++stats_.taint_refusals;
  if (!refusing_) {
    spdlog::error(
        "kubernetes: NOT tainting node {} although a GPU fails: {} of {} GPU nodes ({}) already "
        "carry {}, and at most {} may (--max-tainted-share {}; decided by {}{}). A fleet-wide "
        "fault this large is more likely a false alarm (driver roll-out, bad health policy) than "
        "broken GPUs; check the other nodes' verdicts",
        options_.node_name, decision->tainted_nodes, decision->gpu_nodes,
        options_.gpu_node_selector, options_.taint_key, decision->max_tainted_nodes,
        options_.max_tainted_share,
        decision->source == BreakerSource::kRemediator ? "the remediator's circuit breaker"
                                                       : "this check's own count",
        decision->fallback_why.empty() ? "" : ": " + decision->fallback_why);
    refusing_ = true;
  }
  return false;
}

void NodeReporter::AddFaultsOps(const std::string& faults, Json* ops) const {
  const std::string path = "/metadata/annotations/" + PointerToken(kFaultsAnnotation);
  if (faults.empty()) {
    if (!faults_on_node_.empty()) ops->push_back({{"op", "remove"}, {"path", path}});
  } else {
    // "add" replaces a member that is there: one op either way (the annotations exist by now:
    // the ownership annotation is added before it when they did not).
    ops->push_back({{"op", "add"}, {"path", path}, {"value", faults}});
  }
}

absl::Status NodeReporter::AddTaint(absl::Time now, std::optional<std::string>* faults) {
  const Json taint = {{"key", options_.taint_key}, {"effect", "NoSchedule"}};
  Json ops = Json::array();
  // The spec as last seen: a concurrent change of the taints (or anything else in the spec) makes
  // the server refuse the patch; writes of metadata or status by others do not.
  ops.push_back({{"op", "test"}, {"path", "/spec"}, {"value", spec_}});
  if (has_taints_) {
    ops.push_back({{"op", "add"}, {"path", "/spec/taints/-"}, {"value", taint}});
  } else {
    ops.push_back({{"op", "add"}, {"path", "/spec/taints"}, {"value", Json::array({taint})}});
  }
  if (has_annotations_) {
    ops.push_back({{"op", "add"},
                   {"path", "/metadata/annotations/" + PointerToken(kTaintOwnerAnnotation)},
                   {"value", options_.taint_key}});
  } else {
    // Adding the whole map would replace one someone just created: only on the version read.
    ops.insert(
        ops.begin(),
        Json{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", resource_version_}});
    ops.push_back({{"op", "add"},
                   {"path", "/metadata/annotations"},
                   {"value", {{kTaintOwnerAnnotation, options_.taint_key}}}});
  }
  if (absl::Status patched =
          PatchTaint(std::move(ops), faults, fmt::format("tainting node {}", options_.node_name));
      !patched.ok()) {
    return patched;
  }
  ++stats_.taints_added;
  spdlog::warn("kubernetes: tainted node {} with {}:NoSchedule at {} (a GPU fails)",
               options_.node_name, options_.taint_key, kube::Time(now));
  return absl::OkStatus();
}

absl::Status NodeReporter::PatchTaint(Json ops, std::optional<std::string>* faults,
                                      const std::string& what) {
  if (faults->has_value()) AddFaultsOps(**faults, &ops);
  auto node = Check(
      api_->Call("PATCH", "/api/v1/nodes/" + options_.node_name, kJsonPatch, ops.dump()), what);
  if (!node.ok()) return node.status();
  LearnNode(*node);
  if (faults->has_value()) {
    ++stats_.faults_published;
    faults->reset();
  }
  return absl::OkStatus();
}

absl::Status NodeReporter::RemoveTaint(std::optional<std::string>* faults) {
  const std::string index = std::to_string(taint_index_);
  Json ops =
      Json::array({{{"op", "test"}, {"path", "/spec"}, {"value", spec_}},
                   {{"op", "remove"}, {"path", "/spec/taints/" + index}},
                   {{"op", "remove"},
                    {"path", "/metadata/annotations/" + PointerToken(kTaintOwnerAnnotation)}}});
  if (absl::Status patched = PatchTaint(
          std::move(ops), faults, fmt::format("removing the taint of node {}", options_.node_name));
      !patched.ok()) {
    return patched;
  }
  ++stats_.taints_removed;
  spdlog::info("kubernetes: removed the {}:NoSchedule taint of node {} (healthy for {})",
               options_.taint_key, options_.node_name,
               absl::FormatDuration(options_.untaint_after));
  return absl::OkStatus();
}

absl::Status NodeReporter::PatchFaults(const std::string& faults) {
  // A merge patch of one annotation of ours: no precondition needed, nothing else is touched.
  const Json patch = {
      {"metadata",
       {{"annotations", {{kFaultsAnnotation, faults.empty() ? Json(nullptr) : Json(faults)}}}}}};
  auto node = Check(
      api_->Call("PATCH", "/api/v1/nodes/" + options_.node_name, kube::kMergePatch, patch.dump()),
      fmt::format("publishing the GPU faults of node {}", options_.node_name));
  if (!node.ok()) return node.status();
  LearnNode(*node);
  ++stats_.faults_published;
  spdlog::info("kubernetes: node {}: {}", options_.node_name,
               faults.empty() ? "no GPU fault any more (vigil.dev/gpu-faults removed)"
                              : "GPU faults published (vigil.dev/gpu-faults)");
  return absl::OkStatus();
}

}  // namespace vigil
