// Implements the web links: one GET per look, parsed for what the stage needs.
#include "drill/web_links.h"

#include <algorithm>

#include "api/convert.h"
#include "drill/http_get.h"
#include "fmt/format.h"
#include "kube/object.h"
#include "nlohmann/json.hpp"

namespace vigil::drill {
namespace {

using Json = nlohmann::json;
using kube::At;
using kube::StringAt;

// What a downstream link must show of the GPU's status number: the engine's fault status once
// known (any worse than the baseline before), or the baseline on the way back.
bool StatusShows(int shown, const Target& target, Want want) {
  if (want == Want::kRecovered) return IsBack(shown, target);
  if (target.fault != v1::HEALTH_STATUS_UNSPECIFIED) {
    return shown == HealthStatusNumber(target.fault);
  }
  return shown > HealthStatusNumber(target.baseline);
}

// The exporter speaks in numbers, the health check in names: one table for both ways.
constexpr std::pair<int, std::string_view> kStatusNames[] = {
    {0, "PASS"}, {10, "WARN"}, {20, "FAIL"}};

std::string_view StatusName(int number) {
  for (const auto& [value, name] : kStatusNames) {
    if (value == number) return name;
  }
  return "UNKNOWN";
}

int StatusNumber(std::string_view name) {
  for (const auto& [value, known] : kStatusNames) {
    if (known == name) return value;
  }
  return -1;  // UNKNOWN
}

absl::StatusOr<Json> GetJson(const std::string& url, const std::string& path) {
  auto body = HttpGet(url, path);
  if (!body.ok()) return body.status();
  Json json = Json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::FailedPreconditionError(
        fmt::format("GET {}{}: the answer is not JSON: is this the right URL?", url, path));
  }
  return json;
}

// ---------------------------------------------------------------------------------------------

class ExporterLink final : public Link {
 public:
  explicit ExporterLink(std::string url) : url_(std::move(url)) {}
  Stage stage() const override { return Stage::kExporter; }
  std::string name() const override { return fmt::format("the exporter at {}", url_); }

  absl::Status Preflight(const Target& target, bool) override {
    auto scrape = Read(target);
    if (!scrape.ok()) return scrape.status();
    if (auto follows = CheckFollows(name(), scrape->instance_id, scrape->node, target);
        !follows.ok()) {
      return follows;
    }
    if (!scrape->engine_up) {
      return absl::FailedPreconditionError(
          fmt::format("{} has no fresh data from its engine (vigil_engine_up 0)", name()));
    }
    if (!scrape->worst.has_value()) {
      return absl::FailedPreconditionError(
          fmt::format("{} serves no vigil_gpu_health_status for GPU {}", name(), target.gpu));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark&) override {
    auto scrape = Read(target);
    if (!scrape.ok()) return scrape.status();
    Observation seen{.instance_id = scrape->instance_id, .node = scrape->node, .seq = scrape->seq};
    if (!scrape->engine_up || !scrape->worst.has_value()) {
      seen.detail = scrape->engine_up
                        ? fmt::format("no vigil_gpu_health_status for GPU {}", target.gpu)
                        : "vigil_engine_up 0: no fresh data from its engine";
      return seen;
    }
    bool shown = StatusShows(*scrape->worst, target, want);
    seen.detail = fmt::format("vigil_gpu_health_status{{gpu=\"{}\"}} {} ({})", target.gpu,
                              *scrape->worst, StatusName(*scrape->worst));
    if (scrape->dcgm_all.has_value()) {
      shown = shown && StatusShows(*scrape->dcgm_all, target, want);
      seen.detail +=
          fmt::format(", DCGM_EXP_GPU_HEALTH_STATUS{{health_watch=\"ALL\"}} {}", *scrape->dcgm_all);
    }
    if (want == Want::kFault && target.xid.has_value() && scrape->xid.has_value()) {
      shown = shown && *scrape->xid == static_cast<double>(*target.xid);
      seen.detail += fmt::format(", DCGM_FI_DEV_XID_ERRORS {}", *scrape->xid);
    }
    seen.shown = shown;
    return seen;
  }

 private:
  struct Scrape {
    std::string instance_id, node;
    uint64_t seq = 0;
    bool engine_up = false;
    std::optional<int> worst;     // of the GPU's vigil_gpu_health_status
    std::optional<int> dcgm_all;  // DCGM_EXP_GPU_HEALTH_STATUS health_watch="ALL"
    std::optional<double> xid;    // DCGM_FI_DEV_XID_ERRORS
  };

  absl::StatusOr<Scrape> Read(const Target& target) {
    auto body = HttpGet(url_, "/metrics");
    if (!body.ok()) return body.status();
    Scrape scrape;
    const std::string gpu = std::to_string(target.gpu);
    for (const Sample& sample :
         ParseSamples(*body, {"vigil_engine_up", "vigil_engine_info", "vigil_engine_seq",
                              "vigil_gpu_health_status", "DCGM_EXP_GPU_HEALTH_STATUS",
                              "DCGM_FI_DEV_XID_ERRORS"})) {
      const auto label = [&](const char* key) {
        auto it = sample.labels.find(key);
        return it == sample.labels.end() ? std::string() : it->second;
      };
      if (sample.name == "vigil_engine_up") {
        scrape.engine_up = sample.value == 1;
      } else if (sample.name == "vigil_engine_info") {
        scrape.instance_id = label("instance_id");
        scrape.node = label("node");
      } else if (sample.name == "vigil_engine_seq") {
        scrape.seq = static_cast<uint64_t>(sample.value);
      } else if (label("gpu") != gpu) {
        continue;
      } else if (sample.name == "vigil_gpu_health_status") {
        scrape.worst = std::max(scrape.worst.value_or(-1), static_cast<int>(sample.value));
      } else if (sample.name == "DCGM_EXP_GPU_HEALTH_STATUS" && label("health_watch") == "ALL") {
        scrape.dcgm_all = static_cast<int>(sample.value);
      } else if (sample.name == "DCGM_FI_DEV_XID_ERRORS") {
        scrape.xid = sample.value;
      }
    }
    return scrape;
  }

  const std::string url_;
};

// ---------------------------------------------------------------------------------------------

class HealthcheckLink final : public Link {
 public:
  explicit HealthcheckLink(std::string url) : url_(std::move(url)) {}
  Stage stage() const override { return Stage::kHealthcheck; }
  std::string name() const override { return fmt::format("the health check at {}", url_); }

  absl::Status Preflight(const Target& target, bool) override {
    auto status = GetJson(url_, "/status");
    if (!status.ok()) return status.status();
    const Json& engine = At(*status, "engine");
    if (auto follows =
            CheckFollows(name(), StringAt(engine, "instance_id"), StringAt(engine, "node"), target);
        !follows.ok()) {
      return follows;
    }
    if (At(*status, "fresh") != true) {
      return absl::FailedPreconditionError(fmt::format(
          "{} has no fresh verdict from the engine: {}", name(), StringAt(*status, "reason")));
    }
    if (!GpuStatus(*status, target.gpu).has_value()) {
      return absl::FailedPreconditionError(
          fmt::format("{} does not list GPU {}", name(), target.gpu));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark&) override {
    auto status = GetJson(url_, "/status");
    if (!status.ok()) return status.status();
    const Json& engine = At(*status, "engine");
    Observation seen{
        .instance_id = StringAt(engine, "instance_id"),
        .node = StringAt(engine, "node"),
        .seq = At(*status, "seq").is_number_unsigned() ? At(*status, "seq").get<uint64_t>() : 0};
    const std::optional<std::string> gpu = GpuStatus(*status, target.gpu);
    if (!gpu.has_value()) {
      seen.detail =
          fmt::format("GPU {} is not in /status ({})", target.gpu, StringAt(*status, "reason"));
      return seen;
    }
    seen.shown = StatusShows(StatusNumber(*gpu), target, want);
    seen.detail = fmt::format("/status GPU {} {}", target.gpu, *gpu);
    return seen;
  }

 private:
  static std::optional<std::string> GpuStatus(const Json& status, uint32_t gpu) {
    for (const Json& entry : At(status, "gpus")) {
      if (At(entry, "gpu") == gpu) return StringAt(entry, "status");
    }
    return std::nullopt;
  }

  const std::string url_;
};

// ---------------------------------------------------------------------------------------------

// Prometheus and Alertmanager share what an alert about the target is.
class AlertLink : public Link {
 public:
  AlertLink(std::string url, std::vector<std::string> alerts)
      : url_(std::move(url)), alerts_(std::move(alerts)) {}

 protected:
  struct Alert {
    std::string name;
    bool active = false;  // firing (Prometheus) / active or silenced (Alertmanager)
    std::string state;    // as the server says it
    std::string detail;   // its labels and, for Alertmanager, receivers
  };
  // Where the server lists its alerts, the list in its answer, and one alert as the drill says it.
  virtual std::string AlertsPath() const = 0;
  virtual const Json& AlertList(const Json& answer) const = 0;
  virtual Alert Read(const Json& alert) const = 0;

  // Every alert the server has about the target's node and GPU (of the named ones, if any).
  absl::StatusOr<std::vector<Alert>> AlertsAbout(const Target& target) {
    auto answer = GetJson(url_, AlertsPath());
    if (!answer.ok()) return answer.status();
    std::vector<Alert> out;
    for (const Json& alert : AlertList(*answer)) {
      if (About(At(alert, "labels"), target)) out.push_back(Read(alert));
    }
    return out;
  }
  // Why nothing fires, when the server can say more (its rules); "" otherwise.
  virtual std::string WhyNone() { return ""; }

  bool About(const Json& labels, const Target& target) const {
    if (!labels.is_object() || StringAt(labels, "node") != target.node ||
        StringAt(labels, "gpu") != std::to_string(target.gpu)) {
      return false;
    }
    return alerts_.empty() || std::find(alerts_.begin(), alerts_.end(),
                                        StringAt(labels, "alertname")) != alerts_.end();
  }
  static std::string Labels(const Json& labels) {
    std::string out;
    for (const auto& [key, value] : labels.items()) {
      if (key == "alertname" || !value.is_string()) continue;
      out += fmt::format("{}{}=\"{}\"", out.empty() ? "" : ",", key, value.get<std::string>());
    }
    return "{" + out + "}";
  }

 public:
  absl::Status Preflight(const Target& target, bool) override {
    auto alerts = AlertsAbout(target);
    if (!alerts.ok()) return alerts.status();
    for (const Alert& alert : *alerts) {
      if (alert.active) {
        return absl::FailedPreconditionError(fmt::format(
            "{} already has {} {} about node {} GPU {}: resolve it first, or the drill cannot "
            "tell its alert from that one",
            name(), alert.name, alert.state, target.node, target.gpu));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark&) override {
    auto alerts = AlertsAbout(target);
    if (!alerts.ok()) return alerts.status();
    Observation seen;
    std::vector<std::string> active, inactive;
    for (const Alert& alert : *alerts) {
      (alert.active ? active : inactive)
          .push_back(fmt::format("{}{} {}", alert.name, alert.detail, alert.state));
    }
    if (want == Want::kRecovered) {
      seen.shown = active.empty();
      seen.detail =
          active.empty() ? "none active" : fmt::format("still: {}", fmt::join(active, "; "));
      return seen;
    }
    bool every_named = true;
    for (const std::string& wanted : alerts_) {
      every_named &= std::any_of(alerts->begin(), alerts->end(), [&](const Alert& alert) {
        return alert.active && alert.name == wanted;
      });
    }
    seen.shown = !active.empty() && every_named;
    if (!active.empty()) {
      seen.detail = fmt::format("{}", fmt::join(active, "; "));
      if (!every_named) seen.detail += fmt::format(" (expected {})", fmt::join(alerts_, ", "));
    } else if (!inactive.empty()) {
      seen.detail = fmt::format("{}", fmt::join(inactive, "; "));
    } else {
      seen.detail = fmt::format(
          "no alert{} about node {} GPU {}",
          alerts_.empty() ? "" : " named " + fmt::format("{}", fmt::join(alerts_, ", ")),
          target.node, target.gpu);
      if (const std::string why = WhyNone(); !why.empty()) seen.detail += ": " + why;
    }
    return seen;
  }

 protected:
  const std::string url_;
  const std::vector<std::string> alerts_;
};

class PrometheusLink final : public AlertLink {
 public:
  using AlertLink::AlertLink;
  Stage stage() const override { return Stage::kAlert; }
  std::string name() const override { return fmt::format("Prometheus at {}", url_); }

 private:
  std::string AlertsPath() const override { return "/api/v1/alerts"; }
  const Json& AlertList(const Json& answer) const override {
    return At(At(answer, "data"), "alerts");
  }
  Alert Read(const Json& alert) const override {
    const Json& labels = At(alert, "labels");
    const std::string state = StringAt(alert, "state");
    const std::string since = StringAt(alert, "activeAt");
    return {.name = StringAt(labels, "alertname"),
            .active = state == "firing",
            .state = since.empty() ? state : state + " since " + since,
            .detail = Labels(labels)};
  }

  // A Prometheus that does not have the rules never fires: say so rather than "not yet".
  std::string WhyNone() override {
    auto rules = GetJson(url_, "/api/v1/rules?type=alert");
    if (!rules.ok()) return "";
    std::vector<std::string> names;
    for (const Json& group : At(At(*rules, "data"), "groups")) {
      for (const Json& rule : At(group, "rules")) names.push_back(StringAt(rule, "name"));
    }
    if (names.empty())
      return "Prometheus has no alerting rules loaded (load "
             "deploy/kubernetes/base/monitoring.yaml's)";
    for (const std::string& wanted : alerts_) {
      if (std::find(names.begin(), names.end(), wanted) == names.end()) {
        return fmt::format("Prometheus has no alerting rule named {}", wanted);
      }
    }
    return "";
  }
};

class AlertmanagerLink final : public AlertLink {
 public:
  using AlertLink::AlertLink;
  Stage stage() const override { return Stage::kAlertmanager; }
  std::string name() const override { return fmt::format("Alertmanager at {}", url_); }

 private:
  std::string AlertsPath() const override { return "/api/v2/alerts"; }
  const Json& AlertList(const Json& answer) const override { return answer; }
  Alert Read(const Json& alert) const override {
    const Json& labels = At(alert, "labels");
    const std::string state = StringAt(At(alert, "status"), "state");
    std::vector<std::string> receivers;
    for (const Json& receiver : At(alert, "receivers")) {
      receivers.push_back(StringAt(receiver, "name"));
    }
    return {.name = StringAt(labels, "alertname"),
            .active = state == "active" || state == "suppressed",
            .state = state,
            .detail = fmt::format(
                "{} to {}", Labels(labels),
                receivers.empty() ? "no receiver" : fmt::format("{}", fmt::join(receivers, ", ")))};
  }
};

}  // namespace

std::unique_ptr<Link> NewExporterLink(std::string url) {
  return std::make_unique<ExporterLink>(std::move(url));
}
std::unique_ptr<Link> NewHealthcheckLink(std::string url) {
  return std::make_unique<HealthcheckLink>(std::move(url));
}
std::unique_ptr<Link> NewPrometheusLink(std::string url, std::vector<std::string> alerts) {
  return std::make_unique<PrometheusLink>(std::move(url), std::move(alerts));
}
std::unique_ptr<Link> NewAlertmanagerLink(std::string url, std::vector<std::string> alerts) {
  return std::make_unique<AlertmanagerLink>(std::move(url), std::move(alerts));
}

}  // namespace vigil::drill
