// Implements the Kubernetes stages over GETs of the node.
#include "drill/node_links.h"

#include "api/convert.h"
#include "api/node_condition.h"
#include "api/remediation.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "kube/discovery.h"
#include "kube/object.h"
#include "nlohmann/json.hpp"

namespace vigil::drill {
namespace {

using Json = nlohmann::json;
using kube::AnswerText;
using kube::ApiMessage;
using kube::At;
using kube::QueryEscape;
using kube::StringAt;

absl::StatusOr<Json> GetNode(kube::KubeApi* kube, const std::string& node) {
  auto response = kube->Call("GET", "/api/v1/nodes/" + QueryEscape(node), "", "");
  if (!response.ok()) return response.status();
  if (response->status == 404) {
    return absl::NotFoundError(
        fmt::format("the Kubernetes node {} does not exist: check --node", node));
  }
  if (response->status != 200) {
    return absl::FailedPreconditionError(fmt::format("GET node {}: HTTP {}: {}", node,
                                                     response->status, ApiMessage(response->body)));
  }
  Json json = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::FailedPreconditionError(fmt::format("GET node {}: not JSON", node));
  }
  return json;
}

// Whether the node carries the NoSchedule taint `key`.
bool HasNoScheduleTaint(const Json& node, const std::string& key) {
  for (const Json& taint : At(At(node, "spec"), "taints")) {
    if (StringAt(taint, "key") == key && StringAt(taint, "effect") == "NoSchedule") return true;
  }
  return false;
}

struct GpuCondition {
  bool present = false;
  std::string status, reason, message;
  std::string instance_id;  // from the message's "engine ID seq N:"
  uint64_t seq = 0;
};

GpuCondition ReadCondition(const Json& node) {
  GpuCondition out;
  for (const Json& condition : At(At(node, "status"), "conditions")) {
    if (StringAt(condition, "type") != kConditionType) continue;
    out.present = true;
    out.status = StringAt(condition, "status");
    out.reason = StringAt(condition, "reason");
    out.message = StringAt(condition, "message");
  }
  ParseConditionPrefix(out.message, &out.instance_id, &out.seq);
  return out;
}

// What a quarantine stage cannot prove: a quarantine that was there before the drill (`before`,
// seen at preflight of a drill with --force: `what` says which), or one for a WARN (the health
// check quarantines on FAIL only). Nullopt when there is something to prove.
std::optional<Observation> NothingToProve(bool before, std::string_view what, const Target& target,
                                          Want want) {
  if (before) {
    return Observation{
        .detail = fmt::format("{} before the drill (--force): nothing to prove", what),
        .not_applicable = true};
  }
  if (want == Want::kFault && target.fault != v1::HEALTH_STATUS_FAIL) {
    return Observation{.detail = fmt::format("the fault is a {}: the health check quarantines on "
                                             "FAIL only",
                                             HealthStatusText(target.fault)),
                       .not_applicable = true};
  }
  return std::nullopt;
}

// Whether the node's condition says the health check withheld its action from a drill's fault
// injected without --allow-actions.
bool ConditionSaysWithheld(const Json& node) {
  return ReadCondition(node).message.find(kNoActionForDrill) != std::string::npos;
}

class NodeConditionLink final : public Link {
 public:
  NodeConditionLink(kube::KubeApi* kube, std::string node) : kube_(kube), node_(std::move(node)) {}
  Stage stage() const override { return Stage::kNodeCondition; }
  std::string name() const override {
    return fmt::format("the GpuProblem condition of node {}", node_);
  }

  absl::Status Preflight(const Target& target, bool force) override {
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    const GpuCondition condition = ReadCondition(*node);
    if (!condition.present) {
      return absl::FailedPreconditionError(
          fmt::format("node {} has no GpuProblem condition: is the health check running there with "
                      "--kubernetes?",
                      node_));
    }
    if (auto follows = CheckFollows(name(), condition.instance_id, "", target); !follows.ok()) {
      return follows;
    }
    if (condition.status == "True" && !force) {
      return absl::FailedPreconditionError(fmt::format(
          "node {} is already quarantined (GpuProblem=True: {}): resolve it first, or drill "
          "anyway with --force",
          node_, condition.message));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark&) override {
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    const GpuCondition condition = ReadCondition(*node);
    Observation seen{.instance_id = condition.instance_id, .seq = condition.seq};
    seen.detail = fmt::format("GpuProblem={} {}", condition.status, condition.reason);
    const bool names_gpu =
        condition.message.find(fmt::format("GPU {} (", target.gpu)) != std::string::npos;
    const v1::HealthStatus wanted = want == Want::kRecovered ? target.baseline : target.fault;
    switch (wanted) {
      case v1::HEALTH_STATUS_FAIL:
        seen.shown = condition.status == "True" && names_gpu;
        break;
      case v1::HEALTH_STATUS_WARN:
        seen.shown =
            condition.status == "False" &&
            (want == Want::kRecovered || (condition.reason == kReasonGpuWarning && names_gpu));
        break;
      case v1::HEALTH_STATUS_PASS:
        // The condition is the node's: another GPU may warn. Back means not True, and this GPU
        // no longer named.
        seen.shown =
            condition.status == "False" && (condition.reason == kReasonGpusHealthy || !names_gpu);
        break;
      default:  // the engine has not shown the fault yet
        seen.shown = false;
    }
    if (seen.shown && want == Want::kFault &&
        condition.message.find("[injected]") != std::string::npos) {
      seen.detail += " [injected]";
    }
    return seen;
  }

 private:
  kube::KubeApi* const kube_;
  const std::string node_;
};

class TaintLink final : public Link {
 public:
  TaintLink(kube::KubeApi* kube, std::string node, std::string key, bool actions_allowed)
      : kube_(kube), node_(std::move(node)), key_(std::move(key)), allowed_(actions_allowed) {}
  Stage stage() const override { return Stage::kTaint; }
  std::string name() const override { return fmt::format("the taint {} of node {}", key_, node_); }

  absl::Status Preflight(const Target&, bool force) override {
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    tainted_before_ = HasNoScheduleTaint(*node, key_);
    if (tainted_before_ && !force) {
      return absl::FailedPreconditionError(
          fmt::format("node {} already has the taint {}: resolve it first, or drill anyway with "
                      "--force",
                      node_, key_));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark&) override {
    if (auto skip = NothingToProve(tainted_before_, "the node was tainted", target, want)) {
      return *skip;
    }
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    const bool tainted = HasNoScheduleTaint(*node, key_);
    if (allowed_) {
      return Observation{.shown = want == Want::kFault ? tainted : !tainted,
                         .detail = tainted ? fmt::format("{}:NoSchedule", key_) : "no taint"};
    }
    // A dry run: the decision shows in the condition, the action must not happen.
    if (tainted) {
      return Observation{.detail = fmt::format("node {} was tainted {} for a drill's injected "
                                               "fault without --allow-actions",
                                               node_, key_),
                         .failed = true};
    }
    const bool withheld = ConditionSaysWithheld(*node);
    if (want == Want::kRecovered) return Observation{.shown = true, .detail = "no taint"};
    return Observation{
        .shown = withheld,
        .detail = withheld ? "would taint (dry run: the health check withholds the taint from a "
                             "drill without --allow-actions)"
                           : "no taint, and the condition does not say it was withheld"};
  }

 private:
  kube::KubeApi* const kube_;
  const std::string node_;
  const std::string key_;
  const bool allowed_;
  bool tainted_before_ = false;  // seen at preflight (a drill with --force)
};

// One DeviceTaintRule as the drill reports it.
struct DeviceRule {
  std::string name;
  std::string device;  // DRIVER/POOL/DEVICE
  std::string taint;   // KEY=VALUE:EFFECT
};

std::string Describe(const DeviceRule& rule) {
  return fmt::format("DeviceTaintRule {} taints {} {}", rule.name, rule.device, rule.taint);
}

class DeviceQuarantineLink final : public Link {
 public:
  DeviceQuarantineLink(kube::KubeApi* kube, std::string node, std::string key, bool actions_allowed)
      : kube_(kube), node_(std::move(node)), key_(std::move(key)), allowed_(actions_allowed) {}
  Stage stage() const override { return Stage::kDeviceQuarantine; }
  std::string name() const override {
    return fmt::format("the DeviceTaintRules of node {}", node_);
  }

  absl::Status Preflight(const Target& target, bool force) override {
    absl::StatusOr<std::string> version = kube::ServedVersion(
        *kube_, "resource.k8s.io", "devicetaintrules", kube::kDeviceTaintRuleVersions);
    if (!version.ok()) {
      if (version.status().code() != absl::StatusCode::kNotFound) return version.status();
      return absl::FailedPreconditionError(fmt::format(
          "the cluster serves no DeviceTaintRules (resource.k8s.io v1, v1beta2 or v1alpha3): the "
          "health check of node {} quarantines the node, not the GPU",
          node_));
    }
    version_ = *version;
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    auto rules = RulesOf(target);
    if (!rules.ok()) return rules.status();
    quarantined_before_ = HasNoScheduleTaint(*node, key_) || !rules->empty();
    if (quarantined_before_ && !force) {
      return absl::FailedPreconditionError(fmt::format(
          "GPU {} of node {} is quarantined already ({}): resolve it first, or drill anyway with "
          "--force",
          target.gpu, node_,
          rules->empty() ? fmt::format("the node has the taint {}", key_)
                         : Describe(rules->front())));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark&) override {
    if (auto skip = NothingToProve(quarantined_before_, "the GPU or its node was quarantined",
                                   target, want)) {
      return *skip;
    }
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    auto rules = RulesOf(target);
    if (!rules.ok()) return rules.status();
    const bool tainted = HasNoScheduleTaint(*node, key_);
    if (!allowed_) {
      // A dry run: the decision shows in the condition, the action must not happen.
      if (!rules->empty() || tainted) {
        return Observation{.detail = fmt::format(
                               "{} for a drill's injected fault without --allow-actions",
                               rules->empty() ? fmt::format("node {} was tainted {}", node_, key_)
                                              : Describe(rules->front())),
                           .failed = true};
      }
      if (want == Want::kRecovered) return Observation{.shown = true, .detail = "no rule"};
      const bool withheld = ConditionSaysWithheld(*node);
      return Observation{
          .shown = withheld,
          .detail = withheld ? "would quarantine the GPU's device (dry run: the health check "
                               "withholds the DeviceTaintRule from a drill without --allow-actions)"
                             : "no rule, and the condition does not say it was withheld"};
    }
    if (want == Want::kRecovered) {
      if (!rules->empty()) return Observation{.detail = Describe(rules->front()) + " still"};
      return Observation{
          .shown = !tainted,
          .detail = tainted ? fmt::format("no rule, but node {} has the taint {}", node_, key_)
                            : "the rule lifted; no taint"};
    }
    if (rules->empty()) {
      return Observation{
          .detail = tainted ? fmt::format("no DeviceTaintRule names GPU {}, and node {} has the "
                                          "taint {}: the health check quarantined the node instead "
                                          "(its /status says why under quarantine)",
                                          target.gpu, node_, key_)
                            : fmt::format("no DeviceTaintRule names GPU {} yet", target.gpu)};
    }
    const std::string rule = Describe(rules->front());
    if (tainted) {
      return Observation{
          .detail = fmt::format("{}, but node {} has the taint {} too", rule, node_, key_)};
    }
    return Observation{.shown = true,
                       .detail = fmt::format("device quarantined: {}; node untainted", rule)};
  }

 private:
  // The health check's rules for the target GPU, found by the labels it gives them.
  absl::StatusOr<std::vector<DeviceRule>> RulesOf(const Target& target) const {
    const std::string selector =
        fmt::format("{}={},{}={}", kRuleNodeLabel, node_, kRuleGpuLabel, target.uuid);
    auto response = kube_->Call("GET",
                                fmt::format("/apis/resource.k8s.io/{}/devicetaintrules?"
                                            "labelSelector={}",
                                            version_, QueryEscape(selector)),
                                "", "");
    if (!response.ok() || response->status != 200) {
      return absl::UnavailableError(
          fmt::format("listing DeviceTaintRules: {}", AnswerText(response)));
    }
    const Json list = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (list.is_discarded()) {
      return absl::UnavailableError("listing DeviceTaintRules: the answer is not JSON");
    }
    std::vector<DeviceRule> rules;
    for (const Json& item : At(list, "items")) {
      const Json& selector_json = At(At(item, "spec"), "deviceSelector");
      const Json& taint = At(At(item, "spec"), "taint");
      rules.push_back({.name = StringAt(At(item, "metadata"), "name"),
                       .device = fmt::format("{}/{}/{}", StringAt(selector_json, "driver"),
                                             StringAt(selector_json, "pool"),
                                             StringAt(selector_json, "device")),
                       .taint = fmt::format("{}={}:{}", StringAt(taint, "key"),
                                            StringAt(taint, "value"), StringAt(taint, "effect"))});
    }
    return rules;
  }

  kube::KubeApi* const kube_;
  const std::string node_;
  const std::string key_;
  const bool allowed_;
  std::string version_;              // resource.k8s.io's, found at preflight
  bool quarantined_before_ = false;  // seen at preflight (a drill with --force)
};

// The remediator's steps on the node (its vigil.dev/remediation state), for a drill whose fault
// the remediator acts on: an episode newer than the one the node had at preflight, at or past
// the step this stage is about. The steps can pass quicker than a look: a later step shows the
// earlier ones happened.
class RemediationLink final : public Link {
 public:
  RemediationLink(kube::KubeApi* kube, std::string node, Stage stage, bool actions_allowed)
      : kube_(kube), node_(std::move(node)), stage_(stage), allowed_(actions_allowed) {}
  Stage stage() const override { return stage_; }
  std::string name() const override {
    return fmt::format("the remediator's {} of node {}", StageName(stage_), node_);
  }

  absl::Status Preflight(const Target&, bool force) override {
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    auto state = ReadState(*node);
    if (!state.ok()) return state.status();
    baseline_ = state->episode_started;
    if (state->step != RemediationStep::kIdle && !force) {
      return absl::FailedPreconditionError(fmt::format(
          "node {} is under remediation already ({}: {}): let it finish, or drill anyway with "
          "--force",
          node_, RemediationStepName(state->step), state->message));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target&, Want want, const Mark&) override {
    if (!allowed_) {
      return Observation{
          .detail =
              "the remediator handles a drill's fault without --allow-actions as a dry run "
              "(VigilDryRun Events on the node)",
          .not_applicable = true};
    }
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    auto state = ReadState(*node);
    if (!state.ok()) return state.status();
    const bool this_drill = state->episode_started > baseline_;
    if (!this_drill) {
      return Observation{.detail = "the remediator has not taken the node on"};
    }
    const std::string step(RemediationStepName(state->step));
    const std::string what =
        fmt::format("{} ({}): {}", step, RecommendedActionText(state->action), state->message);
    if (state->step == RemediationStep::kEscalated ||
        (state->step == RemediationStep::kDrainStuck && stage_ != Stage::kQuarantine)) {
      return Observation{.detail = what, .failed = true};
    }
    if (want == Want::kRecovered) {
      return Observation{.shown = state->step == RemediationStep::kIdle,
                         .detail = state->step == RemediationStep::kIdle
                                       ? fmt::format("handed back: {}", state->message)
                                       : what};
    }
    // How far the episode has come: draining 1, recovering 2, verifying or handed back 3.
    const int reached =
        state->step == RemediationStep::kDraining || state->step == RemediationStep::kDrainStuck ? 1
        : state->step == RemediationStep::kRecovering                                            ? 2
                                                      : 3;
    const int wanted = stage_ == Stage::kQuarantine ? 1 : stage_ == Stage::kDrain ? 2 : 3;
    std::string detail = what;
    if (stage_ == Stage::kQuarantine) {
      detail = state->scope == EpisodeScope::kGpu
                   ? fmt::format("{}: {} only, the node stays in service: {}", state->incident,
                                 GpuRefsText(state->gpus), what)
                   : fmt::format("{}: {}", state->incident, what);
    } else if (stage_ == Stage::kDrain && reached >= 2) {
      std::string pods;
      for (const DrainPodState& pod : state->drain) {
        pods += fmt::format("{}{} {}", pods.empty() ? "" : ", ", pod.id,
                            DrainPodOutcomeName(pod.outcome));
      }
      detail = fmt::format("drained ({})", pods.empty() ? "no pod to evict" : pods);
    }
    return Observation{.shown = reached >= wanted, .detail = detail};
  }

 private:
  absl::StatusOr<NodeRemediation> ReadState(const Json& node) const {
    const std::string text =
        StringAt(At(At(node, "metadata"), "annotations"), kRemediationAnnotation);
    if (text.empty()) return NodeRemediation{};
    return ParseRemediation(text);
  }

  kube::KubeApi* const kube_;
  const std::string node_;
  const Stage stage_;
  const bool allowed_;
  absl::Time baseline_ = absl::InfinitePast();  // the node's last episode before the drill
};

}  // namespace

absl::StatusOr<QuarantineScope> FindQuarantineScope(kube::KubeApi* kube, const std::string& node,
                                                    const Json* healthcheck_status) {
  if (healthcheck_status != nullptr && healthcheck_status->is_object()) {
    const Json& quarantine = At(*healthcheck_status, "quarantine");
    const Json& active = At(quarantine, "active");
    if (active.is_boolean()) {
      return QuarantineScope{
          .gpu = active.get<bool>(),
          .why = fmt::format("the health check's /status says it quarantines {} (--quarantine {})",
                             active.get<bool>() ? "the GPU (DeviceTaintRules)" : "the node",
                             StringAt(quarantine, "mode"))};
    }
    if (At(*healthcheck_status, "kubernetes").is_object()) {
      return QuarantineScope{.why =
                                 "the health check's /status shows no per-GPU quarantine: it "
                                 "quarantines the node"};
    }
  }
  absl::StatusOr<std::string> rules = kube::ServedVersion(
      *kube, "resource.k8s.io", "devicetaintrules", kube::kDeviceTaintRuleVersions);
  if (!rules.ok()) {
    if (rules.status().code() != absl::StatusCode::kNotFound) return rules.status();
    return QuarantineScope{.why =
                               "the cluster serves no DeviceTaintRules: the health check "
                               "quarantines the node"};
  }
  absl::StatusOr<std::string> slices =
      kube::ServedVersion(*kube, "resource.k8s.io", "resourceslices", kube::kResourceSliceVersions);
  if (!slices.ok()) return slices.status();
  auto response =
      kube->Call("GET",
                 fmt::format("/apis/resource.k8s.io/{}/resourceslices?fieldSelector={}", *slices,
                             QueryEscape(fmt::format("spec.nodeName={}", node))),
                 "", "");
  if (!response.ok() || response->status != 200) {
    return absl::UnavailableError(
        fmt::format("listing the ResourceSlices of node {}: {}", node, AnswerText(response)));
  }
  const Json list = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  size_t devices = 0;
  for (const Json& slice : At(list, "items")) {
    if (StringAt(At(slice, "spec"), "driver") != kNvidiaGpuDriver) continue;
    devices += At(At(slice, "spec"), "devices").size();
  }
  if (devices == 0) {
    return QuarantineScope{
        .why = fmt::format("no {} devices in the ResourceSlices of node {}: the health check "
                           "quarantines the node (name --healthcheck to read its own word)",
                           kNvidiaGpuDriver, node)};
  }
  return QuarantineScope{
      .gpu = true,
      .why = fmt::format("node {}'s GPUs are {} DRA devices ({}) and the cluster serves "
                         "DeviceTaintRules (resource.k8s.io/{}): the health check's default "
                         "(--quarantine auto) quarantines the GPU (name --healthcheck to read its "
                         "own word)",
                         node, kNvidiaGpuDriver, devices, *rules)};
}

std::unique_ptr<Link> NewDeviceQuarantineLink(kube::KubeApi* kube, std::string node,
                                              std::string key, bool actions_allowed) {
  return std::make_unique<DeviceQuarantineLink>(kube, std::move(node), std::move(key),
                                                actions_allowed);
}

std::unique_ptr<Link> NewRemediationLink(kube::KubeApi* kube, std::string node, Stage stage,
                                         bool actions_allowed) {
  return std::make_unique<RemediationLink>(kube, std::move(node), stage, actions_allowed);
}

std::unique_ptr<Link> NewNodeConditionLink(kube::KubeApi* kube, std::string node) {
  return std::make_unique<NodeConditionLink>(kube, std::move(node));
}
std::unique_ptr<Link> NewTaintLink(kube::KubeApi* kube, std::string node, std::string key,
                                   bool actions_allowed) {
  return std::make_unique<TaintLink>(kube, std::move(node), std::move(key), actions_allowed);
}

}  // namespace vigil::drill
