// Implements the circuit breaker's publication (breaker_publisher.h).
#include "remediator/breaker_publisher.h"

#include "api/node_condition.h"
#include "common/status.h"
#include "fmt/format.h"
#include "kube/object.h"
#include "spdlog/spdlog.h"

namespace vigil::remediator {

using Json = nlohmann::json;

namespace {

// An answer that is not 2xx, saying what failed (a 403: the RBAC the remediator lacks).
absl::Status HttpError(const std::string& what, const kube::KubeResponse& response) {
  return absl::UnavailableError(fmt::format(
      "{}: {} {}{}", what, response.status, kube::ApiMessage(response.body),
      response.status == 403 ? " (does the remediator's Role from deploy/ allow configmaps get, "
                               "create and update?)"
                             : ""));
}

}  // namespace

BreakerPublisher::BreakerPublisher(BreakerPublisherOptions options, kube::KubeApi* api)
    : options_(std::move(options)), api_(api) {}

std::string BreakerPublisher::Path(bool collection) const {
  return fmt::format("/api/v1/namespaces/{}/configmaps{}", options_.ns,
                     collection ? "" : "/" + options_.name);
}

absl::Status BreakerPublisher::Read() {
  auto response = api_->Call("GET", Path(false), "", "");
  const std::string what = fmt::format("reading configmap {}/{}", options_.ns, options_.name);
  if (!response.ok()) {
    return absl::UnavailableError(fmt::format("{}: {}", what, MessageOf(response.status())));
  }
  if (response->status == 404) {
    published_.reset();
    resource_version_.clear();
    read_ = true;
    return absl::OkStatus();
  }
  if (response->status < 200 || response->status >= 300) {
    return HttpError(what, *response);
  }
  const Json object = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  resource_version_ = kube::StringAt(kube::At(object, "metadata"), "resourceVersion");
  auto breaker = BreakerFromData(kube::At(object, "data"));
  // Unreadable (edited by hand): rewritten with the decision at the next call.
  published_ = breaker.ok() ? std::optional(*breaker) : std::nullopt;
  read_ = true;
  return absl::OkStatus();
}

absl::Status BreakerPublisher::Publish(const BreakerCounts& counts, absl::Time now) {
  const double share = options_.max_tainted_share;
  PublishedBreaker next{.state = DecideBreaker(counts.tainted_nodes, counts.gpu_nodes,
                                               counts.out_of_service_gpus, counts.gpus, share),
                        .taint_key = options_.taint_key,
                        .tainted_nodes = counts.tainted_nodes,
                        .gpu_nodes = counts.gpu_nodes,
                        .max_tainted_nodes = MaxTaintedNodes(share, counts.gpu_nodes),
                        .out_of_service_gpus = counts.out_of_service_gpus,
                        .gpus = counts.gpus,
                        .max_out_of_service_gpus = MaxTaintedNodes(share, counts.gpus),
                        .max_tainted_share = share,
                        .changed = now,
                        .renewed = now,
                        .decided_by = options_.identity};
  if (!read_) {
    if (absl::Status read = Read(); !read.ok()) {
      ++stats_.errors;
      return read;
    }
  }
  // Written when the state changes (or the object says something else: another key or share,
  // an edit), and renewed while it does not; the counts between writes are not news.
  const bool same = published_.has_value() && published_->state == next.state &&
                    published_->taint_key == next.taint_key &&
                    published_->max_tainted_share == next.max_tainted_share;
  if (same && now - published_->renewed < kBreakerRenewEvery) return absl::OkStatus();
  if (same) next.changed = published_->changed;
  Json object = {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata",
       {{"name", options_.name},
        {"namespace", options_.ns},
        {"labels",
         {{"app.kubernetes.io/name", "vigil"}, {"app.kubernetes.io/component", "remediator"}}}}},
      {"data", BreakerToData(next)}};
  const bool create = resource_version_.empty();
  if (!create) object["metadata"]["resourceVersion"] = resource_version_;
  auto response =
      api_->Call(create ? "POST" : "PUT", Path(create), kube::kJsonContent, object.dump());
  const std::string what =
      fmt::format("publishing the circuit breaker (configmap {}/{})", options_.ns, options_.name);
  if (!response.ok()) {
    ++stats_.errors;
    return absl::UnavailableError(fmt::format("{}: {}", what, MessageOf(response.status())));
  }
  if (response->status == 409) {
    // Written by another replica (or created since the read): read again next time.
    ++stats_.errors;
    read_ = false;
    return absl::AbortedError(
        fmt::format("{}: 409 {}; reading it again", what, kube::ApiMessage(response->body)));
  }
  if (response->status == 404 && !create) {
    read_ = false;  // deleted since: created next time
    ++stats_.errors;
    return absl::UnavailableError(fmt::format("{}: deleted meanwhile; creating it again", what));
  }
  if (response->status < 200 || response->status >= 300) {
    ++stats_.errors;
    return HttpError(what, *response);
  }
  const Json written = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  resource_version_ = kube::StringAt(kube::At(written, "metadata"), "resourceVersion");
  if (!published_.has_value() || published_->state != next.state) {
    spdlog::log(next.state == BreakerState::kOpen ? spdlog::level::err : spdlog::level::info,
                "remediation: circuit breaker {}: {} of {} GPU nodes carry {} (at most {} may), "
                "{} of {} GPUs are out of service (at most {} may; --max-tainted-share {}): health "
                "checks {} taint their nodes or quarantine GPUs",
                BreakerStateName(next.state), counts.tainted_nodes, counts.gpu_nodes,
                options_.taint_key, next.max_tainted_nodes, counts.out_of_service_gpus, counts.gpus,
                next.max_out_of_service_gpus, options_.max_tainted_share,
                next.state == BreakerState::kOpen ? "may not" : "may");
  }
  published_ = next;
  ++stats_.writes;
  stats_.open = next.state == BreakerState::kOpen;
  stats_.published = true;
  return absl::OkStatus();
}

}  // namespace vigil::remediator
