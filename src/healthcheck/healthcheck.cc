// Implements the health check daemon's wiring: monitor -> endpoints, monitor -> node reporter.
#include "healthcheck/healthcheck.h"

#include <algorithm>

#include "common/prometheus_text.h"
#include "fmt/format.h"
#include "healthcheck/condition.h"
#include "healthcheck/gpu_pods.h"

namespace vigil {
namespace {

constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

// Whether a failing node needs its taint although GPUs may be quarantined alone: a node-level
// failure (an NVSwitch), or a failing GPU that no DeviceTaintRule takes out of service.
bool NodeTaintNeeded(const HealthView& view, const DeviceQuarantine& quarantine) {
  for (const v1::SystemHealth& system : view.verdict.node_systems()) {
    if (system.status() == v1::HEALTH_STATUS_FAIL) return true;
  }
  const std::vector<FailingGpu> actionable = FailingGpusOf(view.verdict);
  for (const v1::GpuHealth& gpu : view.verdict.gpus()) {
    if (gpu.status() != v1::HEALTH_STATUS_FAIL) continue;
    // A drill's failure without --allow-actions quarantines nothing: the reporter says what it
    // would have done (and withholds it).
    const bool acts =
        std::any_of(actionable.begin(), actionable.end(),
                    [&](const FailingGpu& failing) { return failing.gpu == gpu.gpu(); });
    if (!acts) return true;
  }
  return !quarantine.CoversEvery(view.gpus, actionable);
}

}  // namespace

Healthcheck::Healthcheck(HealthcheckOptions options)
    : options_(std::move(options)), started_(options_.clock->Now()) {
  if (options_.exporter_metrics) process_ = std::make_unique<procmetrics::ProcessCollector>();
}

absl::StatusOr<std::unique_ptr<Healthcheck>> Healthcheck::Start(
    HealthcheckOptions options, std::unique_ptr<EngineClient> client) {
  std::unique_ptr<Healthcheck> check(new Healthcheck(std::move(options)));
  const bool remediation = check->options_.kube != nullptr && check->options_.remediation;
  if (remediation && !check->options_.pod_resources_socket.empty()) {
    check->pods_ = std::make_unique<PodMapper>(
        PodMapperOptions{.socket_path = check->options_.pod_resources_socket});
  }
  if (check->options_.kube != nullptr) check->MakeReporter(remediation);
  if (check->options_.kube != nullptr && !check->options_.dra_driver.empty()) check->MakeDra();
  Healthcheck* self = check.get();
  if (remediation) {
    check->relay_ = std::make_unique<RemediationRelay>(
        RelayOptions{.node_name = check->options_.node_name,
                     .reboot_sentinel = check->options_.reboot_sentinel,
                     .clock = check->options_.clock},
        check->options_.kube.get(), std::move(check->options_.relay_engine),
        [self] { return self->reporter_->node_watch().Get(self->options_.node_name); });
  }
  check->monitor_ = std::make_unique<HealthMonitor>(std::move(client), check->options_.node_name,
                                                    check->options_.clock, [self] {
                                                      // A new verdict: whatever acts on it looks
                                                      // again.
                                                      if (self->reporter_ != nullptr)
                                                        self->reporter_->Wake();
                                                      if (self->relay_ != nullptr)
                                                        self->relay_->Wake();
                                                      if (self->quarantine_ != nullptr)
                                                        self->quarantine_->Wake();
                                                    });
  check->Route();
  check->http_.SetGuard(check->options_.http_guard);
  if (absl::Status started = check->http_.Start(check->options_.listen); !started.ok()) {
    return started;
  }
  check->monitor_->Start();
  if (check->reporter_ != nullptr) check->reporter_->Start();
  if (check->pods_ != nullptr) check->pods_->Start();
  if (check->relay_ != nullptr) check->relay_->Start();
  if (check->dra_ != nullptr) check->dra_->Start();
  if (check->quarantine_ != nullptr) check->quarantine_->Start();
  return check;
}

void Healthcheck::MakeReporter(bool remediation) {
  // The condition, and with --remediation the node's faults (a fresh verdict's FAIL incidents,
  // with the pods of each failing GPU when the kubelet's mapping is known), from one view.
  reporter_ = std::make_unique<NodeReporter>(
      options_.reporter, options_.kube.get(), options_.clock, [this, remediation](absl::Time now) {
        const HealthView view = monitor_->View();
        DesiredNodeState wanted;
        wanted.condition = ConditionFromView(view, now, started_, options_.unknown_after);
        // GPUs that DeviceTaintRules take out of service alone need no node taint.
        if (wanted.condition.has_value() && wanted.condition->status == "True" &&
            quarantine_ != nullptr) {
          wanted.condition->node_taint = NodeTaintNeeded(view, *quarantine_);
        }
        // A stale verdict says nothing new about the faults.
        if (remediation && view.fresh(now)) wanted.faults = FaultsToPublish(view);
        return wanted;
      });
}

PublishedFaults Healthcheck::FaultsToPublish(const HealthView& view) {
  PublishedFaults faults = RemediationRelay::FaultsOf(view, KnownPods(view.gpus));
  // The failing GPUs DeviceTaintRules hold: the remediator drains those alone.
  if (quarantine_ != nullptr) {
    for (QuarantinedDevice& device : quarantine_->Quarantined()) {
      if (std::any_of(faults.faults.begin(), faults.faults.end(),
                      [&](const PublishedFault& fault) { return fault.uuid == device.uuid; })) {
        faults.devices.push_back(std::move(device));
      }
    }
  }
  return faults;
}

void Healthcheck::MakeDra() {
  dra_ = std::make_unique<DraDevices>(
      options_.kube.get(),
      DraDevicesOptions{
          .node_name = options_.node_name, .driver = options_.dra_driver, .clock = options_.clock});
  if (!options_.reporter.taint || options_.quarantine == QuarantineMode::kNode) return;
  quarantine_ = std::make_unique<DeviceQuarantine>(
      DeviceQuarantineOptions{.node_name = options_.node_name,
                              .mode = options_.quarantine,
                              .effect = options_.device_taint_effect,
                              .untaint_after = options_.reporter.untaint_after,
                              .clock = options_.clock,
                              .event_namespace = options_.reporter.event_namespace,
                              .on_change = [this] { reporter_->Wake(); },
                              .breaker_refusal = [this] { return BreakerRefusal(); }},
      options_.kube.get(), dra_.get(), [this] {
        const HealthView view = monitor_->View();
        DeviceQuarantine::Input input{.gpus = view.gpus,
                                      .engine_instance = view.engine_instance_id};
        if (view.fresh(options_.clock->Now())) input.failing = FailingGpusOf(view.verdict);
        return input;
      });
}

std::optional<std::string> Healthcheck::BreakerRefusal() const {
  std::string unused;
  const std::optional<PublishedBreaker> breaker = reporter_->breaker().Published(&unused);
  if (!breaker.has_value() || breaker->state != BreakerState::kOpen) return std::nullopt;
  return fmt::format("{} of {} GPU nodes tainted, {} of {} GPUs out of service, decided by {}",
                     breaker->tainted_nodes, breaker->gpu_nodes, breaker->out_of_service_gpus,
                     breaker->gpus, breaker->decided_by);
}

void Healthcheck::Route() {
  http_.Get("/healthz", [] { return HttpResponse{.body = "ok\n"}; });
  http_.Get("/readyz", [this] {
    std::string why;
    const bool ready = monitor_->Ready(&why);
    return HttpResponse{.status = ready ? 200 : 503, .body = why + "\n"};
  });
  http_.Get("/status", [this] {
    return HttpResponse{.content_type = "application/json", .body = StatusJson().dump(2) + "\n"};
  });
  http_.Get("/metrics", [this] {
    HttpResponse response{.content_type = kMetricsType, .body = Metrics()};
    if (process_ != nullptr) process_->Append(&response.body);
    return response;
  });
  http_.Get("/", [] {
    return HttpResponse{
        .content_type = "text/html; charset=utf-8",
        .body =
            "<html><head><title>Vigil health check</title></head><body><h1>Vigil health "
            "check</h1><p><a href=\"./status\">Status</a> · <a href=\"./metrics\">Metrics</a> "
            "· <a href=\"./readyz\">Ready</a> · <a href=\"./healthz\">Alive</a></p></body>"
            "</html>\n"};
  });
}

nlohmann::json Healthcheck::StatusJson() const {
  nlohmann::json status = monitor_->StatusJson();
  // With the kubelet's mapping: the pods on each GPU and on each of its MIG instances.
  const HealthView view = monitor_->View();
  if (const std::optional<GpuPodMap> pods = KnownPods(view.gpus)) {
    for (nlohmann::json& gpu : status["gpus"]) {
      const std::string uuid = gpu["uuid"];
      const auto listed = std::find_if(view.gpus.begin(), view.gpus.end(),
                                       [&](const v1::Gpu& known) { return known.uuid() == uuid; });
      const v1::Gpu* known = listed != view.gpus.end() ? &*listed : nullptr;
      gpu["pods"] = PodsOfGpu(*pods, uuid, known);
      if (known == nullptr || !gpu.contains("mig_instances")) continue;
      for (nlohmann::json& instance : gpu["mig_instances"]) {
        for (const v1::MigInstance& mig : known->mig_instances()) {
          if (mig.uuid() == instance["uuid"]) {
            instance["pods"] = PodsOfMigInstance(*pods, *known, mig);
          }
        }
      }
    }
  }
  if (dra_ != nullptr) status["dra"] = dra_->StatusJson(monitor_->View().gpus);
  if (quarantine_ != nullptr) status["quarantine"] = quarantine_->StatusJson();
  if (reporter_ != nullptr) {
    const NodeReporterStats& stats = reporter_->stats();
    status["kubernetes"] = {
        {"node_tainted", stats.tainted.load()},
        {"condition_updates", stats.condition_updates.load()},
        {"events", stats.events.load()},
        {"events_suppressed", stats.events_suppressed.load()},
        {"api_errors", stats.api_errors.load()},
        {"taint_refusals", stats.taint_refusals.load()},
        {"taints_withheld", stats.taints_withheld.load()},
        {"tainting", reporter_->options().taint},
        {"untaint_after_seconds", absl::ToInt64Seconds(reporter_->options().untaint_after)},
        {"faults_published", stats.faults_published.load()},
        {"watch_synced", reporter_->node_watch().synced()},
        {"watch_errors", reporter_->node_watch().stats().errors.load()}};
    if (reporter_->options().taint) {
      status["kubernetes"]["circuit_breaker"] = reporter_->breaker().StatusJson();
    }
  }
  return status;
}

std::optional<GpuPodMap> Healthcheck::KnownPods(const std::vector<v1::Gpu>& gpus) const {
  std::optional<GpuPodMap> pods = pods_ != nullptr ? pods_->Known() : std::nullopt;
  if (pods.has_value() && dra_ != nullptr) {
    const dra::DeviceMap map = dra_->Map(gpus);
    AttributeDraDevices(
        [&](const DraAllocation& held) { return map.UuidOf(held.driver, held.pool, held.device); },
        &*pods);
  }
  return pods;
}

Healthcheck::~Healthcheck() { Stop(); }

void Healthcheck::Stop() {
  // The relay reads the reporter's cache and the monitor's view, the reporter the monitor's
  // view: stop them in that order.
  if (relay_ != nullptr) relay_->Stop();
  if (quarantine_ != nullptr) quarantine_->Stop();
  if (dra_ != nullptr) dra_->Stop();
  if (pods_ != nullptr) pods_->Stop();
  if (reporter_ != nullptr) reporter_->Stop();
  if (monitor_ != nullptr) monitor_->Stop();
  http_.Stop();
}

std::string Healthcheck::Metrics() const {
  std::string out = monitor_->Metrics();
  if (reporter_ == nullptr) return out;
  const NodeReporterStats& stats = reporter_->stats();
  const kube::InformerStats& watch = reporter_->node_watch().stats();
  struct Counter {
    const char* name;
    const std::atomic<uint64_t>& value;
    const char* help;
  };
  const Counter counters[] = {
      {"condition_updates", stats.condition_updates, "Writes of the GpuProblem node condition."},
      {"events", stats.events,
       "Event writes on GpuProblem transitions (new Events and series updates)."},
      {"events_suppressed", stats.events_suppressed,
       "Events not written because the node reached its burst cap (20 in 10 minutes)."},
      {"api_errors", stats.api_errors,
       "Kubernetes API calls that failed (no answer or not 2xx); retried with backoff."},
      {"api_conflicts", stats.conflicts,
       "Kubernetes API calls refused as conflicts (409/422); the node is re-read and retried."},
      {"taints_added", stats.taints_added, "NoSchedule taints this check added to its node."},
      {"taints_removed", stats.taints_removed,
       "NoSchedule taints this check removed after the hysteresis period."},
      {"taint_refusals", stats.taint_refusals,
       "Taints not added because too many GPU nodes already carry it (circuit breaker)."},
      {"taints_withheld", stats.taints_withheld,
       "Taints not added because the failure was a drill's injected without --allow-actions."},
      {"faults_published", stats.faults_published,
       "Writes of the vigil.dev/gpu-faults annotation (--remediation)."},
      {"lists", watch.lists, "LIST requests of this node (fieldSelector metadata.name)."},
      {"watches", watch.watches,
       "WATCH requests of this node (one open at a time; re-opened after the server's "
       "timeout, an error, or a re-list)."},
      {"relists", watch.relists,
       "Re-lists of this node after 410 Gone (the watch's resourceVersion expired)."},
      {"watch_errors", watch.errors,
       "Failed LISTs and WATCHes of this node; retried with backoff from the last "
       "resourceVersion."},
      {"watch_events", watch.events, "Changes of this node received from the watch."}};
  PrometheusText text(&out);
  for (const Counter& counter : counters) {
    text.Single(fmt::format("vigil_healthcheck_kube_{}_total", counter.name), MetricType::kCounter,
                counter.help, counter.value.load());
  }
  text.Single("vigil_healthcheck_node_tainted", MetricType::kGauge,
              "Whether the node carries the GPU-problem taint.", stats.tainted.load() ? 1 : 0);
  text.Single("vigil_healthcheck_kube_watch_synced", MetricType::kGauge,
              "Whether this node's object has been listed (kept while the watch reconnects).",
              reporter_->node_watch().synced() ? 1 : 0);
  if (reporter_->options().taint) out += reporter_->breaker().Metrics();
  // The server sends a bookmark about every minute: an age of minutes is a watch that is not
  // being served (it is re-opened when its read times out, after five).
  const absl::Time heard = reporter_->node_watch().last_heard();
  if (heard != absl::InfinitePast()) {
    text.Single("vigil_healthcheck_kube_watch_age_seconds", MetricType::kGauge,
                "Seconds since the API server was last heard from on this node's watch (an "
                "event, a bookmark or a list).",
                absl::ToDoubleSeconds(options_.clock->Now() - heard), 1);
  }
  return out;
}

}  // namespace vigil
