// `vigil healthcheck`'s runtime: the passive health check. Serves /healthz (process alive),
// /readyz (connected to its own node's engine with a fresh verdict), /status (JSON: node, engine
// instance_id and the seq of the verdict, overall and per-GPU status with incidents and actions),
// /metrics (its own) — and, with Kubernetes enabled, keeps the node's GpuProblem condition and
// taint in line with the verdict (NodeReporter) from a thread of its own, so API-server trouble
// never blocks the endpoints; with remediation on, the node's side of remediation too
// (RemediationRelay: the published faults, GPU resets and reboot requests).
// Threads: the monitor's (follows the engine), the reporter's (Kubernetes, optional), the relay's
// and the pod mapper's (remediation, optional), the HTTP server's (endpoints, answered from the
// monitor's view under its mutex).
// Thread-safety: Start()/Stop() from the owner.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/http_server.h"
#include "dra/dra_devices.h"
#include "healthcheck/device_quarantine.h"
#include "healthcheck/monitor.h"
#include "healthcheck/node_reporter.h"
#include "healthcheck/remediation_relay.h"
#include "podresources/pod_mapper.h"
#include "procmetrics/process_metrics.h"

namespace vigil {

struct HealthcheckOptions {
  std::string listen = ":9401";
  // The web config in force on --listen; nullptr: plain HTTP. Not owned; outlives the check.
  HttpGuard* http_guard = nullptr;
  std::string node_name;
  // --enable-exporter-metrics: the process's own process_* series after the others.
  bool exporter_metrics = false;
  // Kubernetes: null for none. Owned.
  std::unique_ptr<kube::KubeApi> kube;
  NodeReporterOptions reporter;
  // With kube: publish the node's faults and relay the remediator's requests. The relay's own
  // engine client (owned; it must be allowed to reset GPUs: root over the Unix socket, or the
  // engine's token over TCP) and the kubelet's pod-resources socket ("" : faults without pods).
  bool remediation = false;
  std::unique_ptr<EngineClient> relay_engine;
  std::string pod_resources_socket;
  std::string reboot_sentinel;
  // With kube: the DRA driver whose ResourceSlices name this node's GPUs as devices
  // (dra/dra_devices.h); "" for none.
  std::string dra_driver = std::string(dra::kNvidiaGpuDriver);
  // With the taint (reporter.taint) and a DRA driver: what a GPU-level failure takes out of
  // service (healthcheck/device_quarantine.h), and the DeviceTaintRules' effect.
  QuarantineMode quarantine = QuarantineMode::kAuto;
  std::string device_taint_effect = "NoSchedule";
  // How long without a fresh verdict before the node condition turns Unknown.
  absl::Duration unknown_after = absl::Seconds(30);
  Clock* clock = Clock::Real();
};

class Healthcheck {
 public:
  // `client` (owned) reaches the engine. Starts following and serving; InvalidArgument /
  // AlreadyExists when --listen is bad or taken.
  static absl::StatusOr<std::unique_ptr<Healthcheck>> Start(HealthcheckOptions options,
                                                            std::unique_ptr<EngineClient> client);
  ~Healthcheck();
  void Stop();
  int port() const { return http_.port(); }
  const HealthMonitor& monitor() const { return *monitor_; }

 private:
  // Start()'s steps, before any thread runs: the node reporter (publishing faults with
  // --remediation), the DRA devices and the per-GPU quarantine, the HTTP routes.
  void MakeReporter(bool remediation);
  void MakeDra();
  void Route();
  // Why the remediator's published breaker refuses a new quarantine now, or nullopt.
  std::optional<std::string> BreakerRefusal() const;
  // The /status body: the monitor's view, with pods, DRA, quarantine and Kubernetes state.
  nlohmann::json StatusJson() const;
  explicit Healthcheck(HealthcheckOptions options);
  std::string Metrics() const;
  // The kubelet's mapping (nullopt when unknown), with the devices pods hold through
  // ResourceClaims moved to the GPUs and MIG instances of `gpus` the DRA driver's slices say they
  // are.
  std::optional<GpuPodMap> KnownPods(const std::vector<v1::Gpu>& gpus) const;
  // The gpu-faults annotation's content for `view` (--remediation), with the quarantined devices.
  PublishedFaults FaultsToPublish(const HealthView& view);

  HealthcheckOptions options_;
  const absl::Time started_;
  std::unique_ptr<NodeReporter> reporter_;
  std::unique_ptr<PodMapper> pods_;
  std::unique_ptr<RemediationRelay> relay_;
  std::unique_ptr<DraDevices> dra_;
  std::unique_ptr<DeviceQuarantine> quarantine_;
  std::unique_ptr<HealthMonitor> monitor_;
  // Set when options_.exporter_metrics; used on the HTTP thread.
  std::unique_ptr<procmetrics::ProcessCollector> process_;
  HttpServer http_;
};

}  // namespace vigil
