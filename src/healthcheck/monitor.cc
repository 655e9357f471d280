// Implements the health check's monitor.
#include "healthcheck/monitor.h"

#include "common/prometheus_text.h"
#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {

HealthMonitor::HealthMonitor(std::unique_ptr<EngineClient> client, std::string node_name,
                             Clock* clock, std::function<void()> on_change)
    : client_(std::move(client)), clock_(clock), on_change_(std::move(on_change)) {
  absl::MutexLock lock(&mutex_);
  view_.node_name = std::move(node_name);
  view_.engine_address = client_->address();
  view_.problem = "not connected to the engine yet";
}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::Start() {
  thread_ = StartNamedThread("vigil-health", [this] { Follow(); });
}

void HealthMonitor::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    if (stream_ != nullptr) stream_->Cancel();
  }
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::Update(const std::function<void(HealthView&)>& change) {
  {
    absl::MutexLock lock(&mutex_);
    change(view_);
  }
  if (on_change_) on_change_();
}

void HealthMonitor::Follow() {
  auto stream = client_->WatchHealth({});
  {
    absl::MutexLock lock(&mutex_);
    if (stopping_) return;
    stream_ = stream.get();
  }
  std::string last_problem;
  while (true) {
    const HealthSubscription::Event event = stream->Next();
    if (event.kind == HealthSubscription::Event::kCancelled) break;
    if (event.kind != HealthSubscription::Event::kMessage) {
      const std::string reason(MessageOf(event.error));
      if (reason != last_problem) {
        spdlog::warn("healthcheck: {}; status UNKNOWN until the engine answers again", reason);
        last_problem = reason;
      }
      Update([&](HealthView& view) {
        view.connected = false;
        view.problem = reason;
      });
      if (event.kind == HealthSubscription::Event::kRejected) {
        // A request the engine refuses (an older engine?) will not improve by retrying fast.
        absl::MutexLock lock(&mutex_);
        if (clock_->AwaitWithTimeout(&mutex_, absl::Condition(&stopping_), absl::Seconds(5))) break;
      }
      continue;
    }
    const v1::HealthUpdate& update = *event.message;
    // Learn (or re-learn) who the engine is before trusting its verdict.
    std::string engine_instance, engine_node;
    absl::Duration tick;
    {
      absl::MutexLock lock(&mutex_);
      engine_instance = view_.engine_instance_id;
      engine_node = view_.engine_node;
      tick = view_.fresh_for / 3;
    }
    if (engine_instance != update.instance_id()) {
      auto info = client_->GetEngineInfo();
      if (!info.ok()) continue;
      engine_instance = info->instance_id();
      engine_node = info->node_name();
      tick = absl::Microseconds(info->tick_interval_us());
      spdlog::info("healthcheck: following engine {} of node {}", engine_instance, engine_node);
    }
    const bool mismatch =
        !engine_node.empty() && !View().node_name.empty() && engine_node != View().node_name;
    std::string problem;
    if (mismatch) {
      problem = fmt::format(
          "the engine at {} belongs to node '{}', not to this node '{}': refusing its view (check "
          "that the engine Service has internalTrafficPolicy: Local and that --node-name / "
          "NODE_NAME are right)",
          client_->address(), engine_node, View().node_name);
      if (problem != last_problem) spdlog::error("healthcheck: {}", problem);
    } else if (!last_problem.empty()) {
      spdlog::info("healthcheck: connected to engine {} of node {}", engine_instance, engine_node);
    }
    last_problem = problem;
    // The GPUs and their MIG instances: listed for a new engine instance or MIG layout (a
    // failed listing is tried again at the next update).
    std::optional<v1::ListGpusResponse> listed;
    {
      const HealthView current = View();
      if (!mismatch && (current.gpus_instance_id != engine_instance ||
                        current.gpus_mig_generation != update.mig_generation())) {
        if (auto gpus = client_->ListGpus(); gpus.ok() && gpus->instance_id() == engine_instance &&
                                             gpus->mig_generation() >= update.mig_generation()) {
          listed = std::move(*gpus);
        }
      }
    }
    Update([&](HealthView& view) {
      if (listed.has_value()) {
        view.gpus.assign(listed->gpus().begin(), listed->gpus().end());
        view.gpus_instance_id = engine_instance;
        view.gpus_mig_generation = listed->mig_generation();
      }
      if (!view.connected && view.have_verdict) ++reconnects_;
      view.connected = true;
      view.engine_instance_id = engine_instance;
      view.engine_node = engine_node;
      view.fresh_for = std::max(absl::Seconds(3), tick * 3);
      view.node_mismatch = mismatch;
      view.problem = problem;
      if (!mismatch) {
        view.verdict = update.verdict();
        view.have_verdict = true;
        view.received = clock_->Now();
      }
    });
  }
  absl::MutexLock lock(&mutex_);
  stream_ = nullptr;
}

namespace {

// One system's incidents, as /status lists them.
void AppendIncidents(const v1::SystemHealth& system, nlohmann::json* out) {
  for (const v1::HealthIncident& incident : system.incidents()) {
    out->push_back(
        {{"system", incident.system()},
         {"status", std::string(HealthStatusText(incident.status()))},
         {"code", incident.code()},
         {"message", incident.message()},
         {"action", incident.action()},
         {"recommended_action", std::string(RecommendedActionText(incident.recommended_action()))},
         {"count", incident.count()},
         {"injected", incident.injected()},
         {"first_seen_us", incident.first_seen_us()},
         {"last_seen_us", incident.last_seen_us()}});
  }
}

}  // namespace

HealthView HealthMonitor::View() const {
  absl::MutexLock lock(&mutex_);
  return view_;
}

bool HealthMonitor::Ready(std::string* why) const {
  const HealthView view = View();
  const absl::Time now = clock_->Now();
  if (view.fresh(now)) {
    *why =
        fmt::format("ready: engine {} of node {}, verdict {} at seq {}", view.engine_instance_id,
                    view.engine_node, HealthStatusText(view.verdict.overall()), view.verdict.seq());
    return true;
  }
  if (!view.problem.empty()) {
    *why = "not ready: " + view.problem;
  } else if (!view.have_verdict) {
    *why = "not ready: no verdict from the engine yet";
  } else {
    *why =
        fmt::format("not ready: the last verdict is {} old (stale)",
                    absl::FormatDuration(absl::Trunc(now - view.received, absl::Milliseconds(1))));
  }
  return false;
}

nlohmann::json HealthMonitor::StatusJson() const {
  const HealthView view = View();
  const absl::Time now = clock_->Now();
  const bool fresh = view.fresh(now);
  std::string why;
  Ready(&why);
  nlohmann::json json = {
      {"node", view.node_name},
      {"status", std::string(HealthStatusText(view.status(now)))},
      {"fresh", fresh},
      {"reason", why},
      {"engine",
       {{"address", view.engine_address},
        {"connected", view.connected},
        {"instance_id", view.engine_instance_id},
        {"node", view.engine_node},
        {"node_mismatch", view.node_mismatch}}},
      {"seq", view.have_verdict ? view.verdict.seq() : 0},
      {"verdict_age_seconds",
       view.have_verdict ? absl::ToDoubleSeconds(now - view.received) : -1.0},
      {"gpus", nlohmann::json::array()},
  };
  if (view.have_verdict) {
    json["verdict_time"] =
        absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMicros(view.verdict.timestamp_us()),
                         absl::UTCTimeZone());
    json["verdict_status"] = std::string(HealthStatusText(view.verdict.overall()));
    for (const v1::GpuHealth& gpu : view.verdict.gpus()) {
      nlohmann::json gpu_json = {
          {"gpu", gpu.gpu()},
          {"uuid", gpu.uuid()},
          {"status",
           std::string(HealthStatusText(fresh ? gpu.status() : v1::HEALTH_STATUS_UNKNOWN))},
          {"verdict_status", std::string(HealthStatusText(gpu.status()))},
          {"systems", nlohmann::json::object()},
          {"incidents", nlohmann::json::array()}};
      for (const v1::SystemHealth& system : gpu.systems()) {
        gpu_json["systems"][system.system()] = std::string(HealthStatusText(system.status()));
        AppendIncidents(system, &gpu_json["incidents"]);
      }
      // On a GPU in MIG mode, its GPU instances (a failing GPU's are what a partial drain acts
      // on; the verdict stays the GPU's).
      for (const v1::Gpu& listed : view.gpus) {
        if (listed.index() != gpu.gpu() || !listed.mig_mode()) continue;
        gpu_json["mig_instances"] = nlohmann::json::array();
        for (const v1::MigInstance& instance : listed.mig_instances()) {
          gpu_json["mig_instances"].push_back(
              {{"gpu_instance_id", instance.gpu_instance_id()},
               {"compute_instance_id", instance.compute_instance_id()},
               {"profile", instance.profile()},
               {"uuid", instance.uuid()}});
        }
      }
      json["gpus"].push_back(gpu_json);
    }
    // The node's own systems (nvswitch), as the verdict has them.
    if (view.verdict.node_systems_size() > 0) {
      nlohmann::json node_json = {{"systems", nlohmann::json::object()},
                                  {"incidents", nlohmann::json::array()}};
      for (const v1::SystemHealth& system : view.verdict.node_systems()) {
        nlohmann::json& system_json = node_json["systems"][system.system()];
        system_json =
            std::string(HealthStatusText(fresh ? system.status() : v1::HEALTH_STATUS_UNKNOWN));
        if (!system.unknown_reason().empty()) {
          node_json["unknown_reasons"][system.system()] = system.unknown_reason();
        }
        AppendIncidents(system, &node_json["incidents"]);
      }
      json["node_systems"] = std::move(node_json);
    }
  }
  return json;
}

std::string HealthMonitor::Metrics() const {
  const HealthView view = View();
  const absl::Time now = clock_->Now();
  std::string out;
  PrometheusText text(&out);
  text.Single("vigil_healthcheck_status", MetricType::kGauge,
              "The node's GPU health as this check acts on it: 0 pass, 10 warn, 20 fail, -1 "
              "unknown (no fresh verdict from the node's engine).",
              HealthStatusNumber(view.status(now)));
  text.Family("vigil_healthcheck_gpu_status", MetricType::kGauge,
              "Per GPU: 0 pass, 10 warn, 20 fail, -1 unknown (no fresh verdict).");
  for (const v1::GpuHealth& gpu : view.verdict.gpus()) {
    text.Sample("vigil_healthcheck_gpu_status",
                {{"gpu", std::to_string(gpu.gpu())}, {"UUID", gpu.uuid()}},
                HealthStatusNumber(view.fresh(now) ? gpu.status() : v1::HEALTH_STATUS_UNKNOWN));
  }
  if (view.verdict.node_systems_size() > 0) {
    text.Family("vigil_healthcheck_node_system_status", MetricType::kGauge,
                "Per node-level system (nvswitch): 0 pass, 10 warn, 20 fail, -1 unknown.");
    for (const v1::SystemHealth& system : view.verdict.node_systems()) {
      text.Sample(
          "vigil_healthcheck_node_system_status", {{"system", system.system()}},
          HealthStatusNumber(view.fresh(now) ? system.status() : v1::HEALTH_STATUS_UNKNOWN));
    }
  }
  text.Single("vigil_healthcheck_verdict_age_seconds", MetricType::kGauge,
              "Time since the last fresh verdict from the engine (-1: none yet).",
              view.have_verdict ? absl::ToDoubleSeconds(now - view.received) : -1.0, 6);
  text.Single("vigil_healthcheck_verdict_seq", MetricType::kGauge,
              "The engine tick of the last verdict.",
              view.have_verdict ? view.verdict.seq() : uint64_t{0});
  text.Single("vigil_healthcheck_engine_up", MetricType::kGauge,
              "Whether the health check receives its node's engine's health stream.",
              view.connected && !view.node_mismatch ? 1 : 0);
  text.Single("vigil_healthcheck_node_mismatch", MetricType::kGauge,
              "1 when the engine reached belongs to another node (its view is refused).",
              view.node_mismatch ? 1 : 0);
  text.Single("vigil_healthcheck_engine_reconnects_total", MetricType::kCounter,
              "Times the health check got its engine back after losing it.", reconnects_.load());
  return out;
}

}  // namespace vigil
