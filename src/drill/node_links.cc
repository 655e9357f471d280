// Implements the Kubernetes stages over GETs of the node.
#include "drill/node_links.h"

#include "api/convert.h"
#include "api/node_condition.h"
#include "api/remediation.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "kube/object.h"
#include "nlohmann/json.hpp"

namespace vigil::drill {
namespace {

using Json = nlohmann::json;
using kube::ApiMessage;
using kube::At;
using kube::QueryEscape;
using kube::StringAt;

absl::StatusOr<Json> GetNode(KubeApi* kube, const std::string& node) {
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

class NodeConditionLink final : public Link {
 public:
  NodeConditionLink(KubeApi* kube, std::string node) : kube_(kube), node_(std::move(node)) {}
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
  KubeApi* const kube_;
  const std::string node_;
};

class TaintLink final : public Link {
 public:
  TaintLink(KubeApi* kube, std::string node, std::string key, bool actions_allowed)
      : kube_(kube), node_(std::move(node)), key_(std::move(key)), allowed_(actions_allowed) {}
  Stage stage() const override { return Stage::kTaint; }
  std::string name() const override { return fmt::format("the taint {} of node {}", key_, node_); }

  absl::Status Preflight(const Target&, bool force) override {
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    tainted_before_ = Tainted(*node);
    if (tainted_before_ && !force) {
      return absl::FailedPreconditionError(
          fmt::format("node {} already has the taint {}: resolve it first, or drill anyway with "
                      "--force",
                      node_, key_));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark&) override {
    // What this drill cannot prove: a taint that was there before it, or one for a WARN (the
    // health check taints on FAIL only).
    if (tainted_before_) {
      return Observation{.detail =
                             "the node was tainted before the drill (--force): nothing to "
                             "prove",
                         .not_applicable = true};
    }
    if (want == Want::kFault && target.fault != v1::HEALTH_STATUS_FAIL) {
      return Observation{.detail = fmt::format("the fault is a {}: the health check taints on FAIL "
                                               "only",
                                               HealthStatusText(target.fault)),
                         .not_applicable = true};
    }
    auto node = GetNode(kube_, node_);
    if (!node.ok()) return node.status();
    const bool tainted = Tainted(*node);
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
    const bool withheld = ReadCondition(*node).message.find(kNoActionForDrill) != std::string::npos;
    if (want == Want::kRecovered) return Observation{.shown = true, .detail = "no taint"};
    return Observation{
        .shown = withheld,
        .detail = withheld ? "would taint (dry run: the health check withholds the taint from a "
                             "drill without --allow-actions)"
                           : "no taint, and the condition does not say it was withheld"};
  }

 private:
  bool Tainted(const Json& node) const {
    for (const Json& taint : At(At(node, "spec"), "taints")) {
      if (StringAt(taint, "key") == key_ && StringAt(taint, "effect") == "NoSchedule") return true;
    }
    return false;
  }

  KubeApi* const kube_;
  const std::string node_;
  const std::string key_;
  const bool allowed_;
  bool tainted_before_ = false;  // seen at preflight (a drill with --force)
};

// The remediator's steps on the node (its vigil.dev/remediation state), for a drill whose fault
// the remediator acts on: an episode newer than the one the node had at preflight, at or past
// the step this stage is about. The steps can pass quicker than a look: a later step shows the
// earlier ones happened.
class RemediationLink final : public Link {
 public:
  RemediationLink(KubeApi* kube, std::string node, Stage stage, bool actions_allowed)
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
      detail = fmt::format("{}: {}", state->incident, what);
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

  KubeApi* const kube_;
  const std::string node_;
  const Stage stage_;
  const bool allowed_;
  absl::Time baseline_ = absl::InfinitePast();  // the node's last episode before the drill
};

}  // namespace

std::unique_ptr<Link> NewRemediationLink(KubeApi* kube, std::string node, Stage stage,
                                         bool actions_allowed) {
  return std::make_unique<RemediationLink>(kube, std::move(node), stage, actions_allowed);
}

std::unique_ptr<Link> NewNodeConditionLink(KubeApi* kube, std::string node) {
  return std::make_unique<NodeConditionLink>(kube, std::move(node));
}
std::unique_ptr<Link> NewTaintLink(KubeApi* kube, std::string node, std::string key,
                                   bool actions_allowed) {
  return std::make_unique<TaintLink>(kube, std::move(node), std::move(key), actions_allowed);
}

}  // namespace vigil::drill
