// Implements the drain: select, evict, retry what a PDB blocks until the timeout.
#include "remediator/drain.h"

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "fmt/format.h"
#include "kube/object.h"
#include "kube/pods.h"

namespace vigil::remediator {
namespace {

using Json = nlohmann::json;

// Why the drain leaves `pod` alone ("" when it evicts it); `gpus` what it holds.
std::string WhyNot(const Json& pod, const std::vector<std::string>& gpus,
                   const DrainOptions& options, const std::string& id) {
  const std::string ns = kube::StringAt(kube::At(pod, "metadata"), "namespace");
  if (kube::IsMirrorPod(pod)) return "a mirror (static) pod: the kubelet's own";
  if (kube::OwnedByDaemonSet(pod)) return "owned by a DaemonSet: it would come straight back";
  if (std::find(options.exclude_namespaces.begin(), options.exclude_namespaces.end(), ns) !=
      options.exclude_namespaces.end()) {
    return fmt::format("namespace {} is excluded", ns);
  }
  if (options.only.has_value()) {
    return std::find(options.only->begin(), options.only->end(), id) == options.only->end()
               ? "does not hold the failing GPU"
               : "";
  }
  if (gpus.empty() && !options.all_pods &&
      std::find(options.claim_holders.begin(), options.claim_holders.end(), id) ==
          options.claim_holders.end()) {
    return "holds no GPU";
  }
  return "";
}

}  // namespace

std::string_view OutcomeName(DrainedPod::Outcome outcome) {
  switch (outcome) {
    case DrainedPod::Outcome::kPending:
      return "pending";
    case DrainedPod::Outcome::kEvicted:
      return "evicted";
    case DrainedPod::Outcome::kGone:
      return "gone";
    case DrainedPod::Outcome::kBlocked:
      return "blocked";
    case DrainedPod::Outcome::kFailed:
      return "failed";
    case DrainedPod::Outcome::kWouldEvict:
      return "would evict";
  }
  return "failed";
}

bool Drained(const DrainedPod& pod) {
  return pod.outcome == DrainedPod::Outcome::kEvicted || pod.outcome == DrainedPod::Outcome::kGone;
}

bool WantsAnotherTry(const DrainedPod& pod) {
  return pod.outcome == DrainedPod::Outcome::kPending ||
         pod.outcome == DrainedPod::Outcome::kBlocked || pod.unanswered;
}

DrainReport PlanDrain(kube::KubeApi& api, const std::string& node, const DrainOptions& options) {
  DrainReport report;
  auto pods = kube::ListPodsOnNode(api, node);
  if (!pods.ok()) {
    report.error = std::string(MessageOf(pods.status()));
    return report;
  }
  for (const Json& pod : *pods) {
    const Json& metadata = kube::At(pod, "metadata");
    DrainedPod drained{.ns = kube::StringAt(metadata, "namespace"),
                       .name = kube::StringAt(metadata, "name"),
                       .gpus = kube::GpuResourcesOf(pod)};
    const std::string id = drained.ns + "/" + drained.name;
    if (const std::string why = WhyNot(pod, drained.gpus, options, id); !why.empty()) {
      report.skipped.push_back(fmt::format("{}: {}", id, why));
      continue;
    }
    if (options.dry_run) drained.outcome = DrainedPod::Outcome::kWouldEvict;
    report.pods.push_back(std::move(drained));
  }
  report.complete = report.pods.empty() || options.dry_run;
  return report;
}

bool EvictRound(kube::KubeApi& api, std::vector<DrainedPod>* pods, absl::Duration* retry_after) {
  *retry_after = absl::ZeroDuration();
  bool pending = false;
  for (DrainedPod& pod : *pods) {
    if (!WantsAnotherTry(pod)) continue;
    ++pod.attempts;
    pod.unanswered = false;
    absl::Duration asked;
    auto result = kube::Evict(api, pod.ns, pod.name, &asked);
    if (!result.ok()) {
      pod.outcome = DrainedPod::Outcome::kFailed;
      pod.detail = std::string(MessageOf(result.status()));
      // No answer, or a server error: worth another try; a refusal is final.
      if (result.status().code() == absl::StatusCode::kUnavailable) {
        pod.unanswered = true;
        pending = true;
      }
      continue;
    }
    switch (*result) {
      case kube::Eviction::kEvicted:
        pod.outcome = DrainedPod::Outcome::kEvicted;
        pod.detail.clear();
        break;
      case kube::Eviction::kGone:
        pod.outcome = DrainedPod::Outcome::kGone;
        pod.detail.clear();
        break;
      case kube::Eviction::kBlocked:
        pod.outcome = DrainedPod::Outcome::kBlocked;
        pod.detail = "a PodDisruptionBudget forbids evicting it now";
        pending = true;
        *retry_after = std::max(*retry_after, asked);
        break;
    }
  }
  return pending;
}

absl::Time NextRoundAfter(absl::Time now, int rounds, absl::Duration retry_after) {
  absl::Duration delay = absl::Seconds(1);
  for (int round = 1; round < rounds && delay < absl::Seconds(30); ++round) delay *= 2;
  return now + std::max(std::min(delay, absl::Seconds(30)), retry_after);
}

DrainReport Drain(kube::KubeApi& api, Clock& clock, const std::string& node,
                  const DrainOptions& options) {
  DrainReport report = PlanDrain(api, node, options);
  if (!report.error.empty() || options.dry_run) return report;
  const absl::Time deadline = clock.Now() + options.timeout;
  for (int rounds = 1;; ++rounds) {
    absl::Duration retry_after;
    if (!EvictRound(api, &report.pods, &retry_after)) break;
    const absl::Time next = NextRoundAfter(clock.Now(), rounds, retry_after);
    if (next > deadline) {
      for (DrainedPod& pod : report.pods) {
        if (pod.outcome == DrainedPod::Outcome::kBlocked && !pod.unanswered) {
          pod.detail = fmt::format(
              "a PodDisruptionBudget still forbade evicting it after {} "
              "({} attempts)",
              absl::FormatDuration(options.timeout), pod.attempts);
        }
      }
      break;
    }
    clock.SleepFor(next - clock.Now());
  }
  report.complete = std::all_of(report.pods.begin(), report.pods.end(), Drained);
  return report;
}

}  // namespace vigil::remediator
