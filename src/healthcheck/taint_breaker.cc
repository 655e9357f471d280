// Implements the health check's circuit breaker (taint_breaker.h).
#include "healthcheck/taint_breaker.h"

#include "api/node_condition.h"
#include "common/prometheus_text.h"
#include "common/status.h"
#include "fmt/format.h"
#include "kube/list.h"
#include "kube/object.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

// Whether a Node (as listed) carries a taint with `key`, of any effect.
bool HasTaintKey(const Json& node, const std::string& key) {
  const Json& taints = kube::At(kube::At(node, "spec"), "taints");
  if (!taints.is_array()) return false;
  for (const Json& taint : taints) {
    if (kube::StringAt(taint, "key") == key) return true;
  }
  return false;
}

}  // namespace

std::string_view BreakerSourceName(BreakerSource source) {
  return source == BreakerSource::kRemediator ? "remediator" : "own-count";
}

TaintBreaker::TaintBreaker(TaintBreakerOptions options, kube::KubeApi* api)
    : options_(std::move(options)),
      api_(api),
      watch_(
          api,
          kube::InformerOptions{
              .path = fmt::format("/api/v1/namespaces/{}/configmaps", options_.breaker_namespace),
              .field_selector = "metadata.name=" + options_.breaker_name,
              // Thirty minutes a watch: one object that changes every few minutes needs
              // no more than bookmarks to stay current.
              .watch_timeout = absl::Minutes(30),
              .transform =
                  [](const Json& config_map) {
                    const Json& metadata = kube::At(config_map, "metadata");
                    return Json{
                        {"metadata",
                         {{"name", kube::StringAt(metadata, "name")},
                          {"namespace", kube::StringAt(metadata, "namespace")},
                          {"resourceVersion", kube::StringAt(metadata, "resourceVersion")}}},
                        {"data", kube::At(config_map, "data")}};
                  },
              .description = fmt::format("the circuit breaker (configmap {}/{})",
                                         options_.breaker_namespace, options_.breaker_name),
              .clock = options_.clock}) {}

TaintBreaker::~TaintBreaker() { Stop(); }

void TaintBreaker::Start() { watch_.Start(); }
void TaintBreaker::Stop() { watch_.Stop(); }

std::optional<PublishedBreaker> TaintBreaker::Published(std::string* why) const {
  const std::string where =
      fmt::format("configmap {}/{}", options_.breaker_namespace, options_.breaker_name);
  if (!watch_.synced()) {
    *why = fmt::format("the {} is not read yet (the informer's log says why)", where);
    return std::nullopt;
  }
  const std::string key = options_.breaker_namespace + "/" + options_.breaker_name;
  const std::optional<Json> object = watch_.Get(key);
  if (!object.has_value()) {
    *why = fmt::format(
        "no {}: is the remediator deployed (it publishes the breaker even with "
        "--mode off)?",
        where);
    return std::nullopt;
  }
  auto breaker = BreakerFromData(kube::At(*object, "data"));
  if (!breaker.ok()) {
    *why = fmt::format("the {} is unreadable: {}", where, MessageOf(breaker.status()));
    return std::nullopt;
  }
  if (breaker->taint_key != options_.taint_key) {
    *why = fmt::format("the {} counts taint {}, this check's is {}", where, breaker->taint_key,
                       options_.taint_key);
    return std::nullopt;
  }
  const absl::Duration age = options_.clock->Now() - breaker->renewed;
  if (age > kBreakerStaleAfter) {
    *why = fmt::format("the {} was last renewed {} ago (more than {}): is the remediator running?",
                       where, absl::FormatDuration(absl::Trunc(age, absl::Seconds(1))),
                       absl::FormatDuration(kBreakerStaleAfter));
    return std::nullopt;
  }
  return *std::move(breaker);
}

absl::StatusOr<TaintDecision> TaintBreaker::Decide() {
  std::string why;
  if (const std::optional<PublishedBreaker> breaker = Published(&why)) {
    ++stats_.decisions_published;
    return TaintDecision{.allowed = breaker->state == BreakerState::kClosed,
                         .source = BreakerSource::kRemediator,
                         .tainted_nodes = breaker->tainted_nodes,
                         .gpu_nodes = breaker->gpu_nodes,
                         .max_tainted_nodes = breaker->max_tainted_nodes};
  }
  return CountOwn(std::move(why));
}

absl::StatusOr<TaintDecision> TaintBreaker::CountOwn(std::string why) {
  const absl::Time now = options_.clock->Now();
  if (own_refusal_.has_value() && now - own_refusal_at_ < kOwnCountEvery) {
    own_refusal_->fallback_why = std::move(why);
    return *own_refusal_;
  }
  own_refusal_.reset();
  TaintDecision decision{.source = BreakerSource::kOwnCount, .fallback_why = std::move(why)};
  bool self_listed = false;
  const kube::ListResult listed = kube::ListAll(
      *api_,
      {.path = "/api/v1/nodes",
       .label_selector = options_.gpu_node_selector,
       .description = fmt::format("the GPU nodes ({})", options_.gpu_node_selector)},
      [&](const Json& node, std::string*) {
        ++decision.gpu_nodes;
        if (kube::StringAt(kube::At(node, "metadata"), "name") == options_.node_name) {
          self_listed = true;
        }
        if (HasTaintKey(node, options_.taint_key)) ++decision.tainted_nodes;
        return true;
      });
  stats_.own_count_lists += listed.pages;
  if (listed.outcome != kube::ListResult::Outcome::kDone) {
    ++stats_.own_count_errors;
    return absl::UnavailableError(fmt::format(
        "deciding whether node {} may be tainted ({}; counting the GPU nodes itself): {}",
        options_.node_name, decision.fallback_why,
        listed.outcome == kube::ListResult::Outcome::kGone ? "the list expired (410)"
                                                           : listed.error));
  }
  ++stats_.own_counts;
  if (!self_listed) ++decision.gpu_nodes;  // this node has GPUs even if its labels do not say so
  decision.max_tainted_nodes = MaxTaintedNodes(options_.max_tainted_share, decision.gpu_nodes);
  decision.allowed = DecideBreaker(decision.tainted_nodes, decision.gpu_nodes,
                                   options_.max_tainted_share) == BreakerState::kClosed;
  if (!decision.allowed) {
    own_refusal_ = decision;
    own_refusal_at_ = now;
  }
  return decision;
}

Json TaintBreaker::StatusJson() const {
  std::string why;
  const std::optional<PublishedBreaker> breaker = Published(&why);
  if (!breaker.has_value()) {
    return {{"source", std::string(BreakerSourceName(BreakerSource::kOwnCount))},
            {"why", why},
            {"own_counts", stats_.own_counts.load()}};
  }
  return {{"source", std::string(BreakerSourceName(BreakerSource::kRemediator))},
          {"state", std::string(BreakerStateName(breaker->state))},
          {"tainted_nodes", breaker->tainted_nodes},
          {"gpu_nodes", breaker->gpu_nodes},
          {"max_tainted_nodes", breaker->max_tainted_nodes},
          {"renewed", kube::Time(breaker->renewed)},
          {"decided_by", breaker->decided_by}};
}

std::string TaintBreaker::Metrics() const {
  std::string why;
  const std::optional<PublishedBreaker> breaker = Published(&why);
  std::string out;
  PrometheusText text(&out);
  text.Single("vigil_healthcheck_kube_breaker_published", MetricType::kGauge,
              "Whether the remediator's circuit breaker (its ConfigMap, fresh) is seen; 0: taint "
              "decisions count the GPU nodes with a LIST.",
              breaker.has_value() ? 1 : 0);
  if (breaker.has_value()) {
    text.Single("vigil_healthcheck_kube_breaker_open", MetricType::kGauge,
                "Whether the remediator's circuit breaker refuses new taints.",
                breaker->state == BreakerState::kOpen ? 1 : 0);
  }
  text.Single("vigil_healthcheck_kube_breaker_own_counts_total", MetricType::kCounter,
              "Taint decisions made by counting the GPU nodes (no remediator's breaker seen).",
              stats_.own_counts.load());
  text.Single("vigil_healthcheck_kube_breaker_own_count_lists_total", MetricType::kCounter,
              "LIST pages those counts cost.", stats_.own_count_lists.load());
  return out;
}

}  // namespace vigil
