// `vigil remediator`'s runtime: one replica of the remediator Deployment. Every replica watches
// the GPU nodes (a standby's cache is warm when it takes over); the one that holds the
// coordination.k8s.io/v1 Lease acts. Every `pass_every` the replica renews (or tries to take) the
// Lease and, while it holds it, makes one pass (Remediator::ReconcileOnce); a replica that cannot
// renew stops acting before its Lease runs out, and one that stops gives the Lease up so another
// takes over at once. Serves /healthz, /readyz (the GPU nodes are listed), /status (each node's
// state machine, JSON; `vigil remediator status` reads it) and /metrics.
// Threads: its own (`vigil-remediate`: the Lease and the passes), the remediator's informer's, the
// HTTP server's. Thread-safety: Start()/Stop() from the owner; the endpoints from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "kube/lease.h"
#include "procmetrics/process_metrics.h"
#include "remediator/remediator.h"

namespace vigil::remediator {

struct RunnerOptions {
  RemediatorOptions remediator;
  kube::LeaseOptions lease;
  std::string listen = ":9402";
  // The web config in force on --listen; nullptr: plain HTTP. Not owned; outlives the runner.
  HttpGuard* http_guard = nullptr;
  absl::Duration pass_every = absl::Seconds(1);
  // --enable-exporter-metrics: the process's own process_* series after the others.
  bool exporter_metrics = false;
};

class Runner {
 public:
  // `api` (owned) reaches the API server. InvalidArgument / AlreadyExists for a bad or taken
  // --listen.
  static absl::StatusOr<std::unique_ptr<Runner>> Start(RunnerOptions options,
                                                       std::unique_ptr<kube::KubeApi> api);
  ~Runner();
  // Stops acting, gives the Lease up, stops watching and serving. Idempotent.
  void Stop();
  int port() const { return http_.port(); }
  bool leading() const { return leading_.load(); }
  const Remediator& remediator() const { return *remediator_; }

 private:
  explicit Runner(RunnerOptions options, std::unique_ptr<kube::KubeApi> api);
  void Loop();
  std::string Metrics() const;

  const RunnerOptions options_;
  const std::unique_ptr<kube::KubeApi> api_;
  std::unique_ptr<Remediator> remediator_;
  kube::LeaseLock lease_;  // the loop's only
  std::atomic<bool> leading_{false};
  std::atomic<uint64_t> lease_errors_{0};
  // Set when options_.exporter_metrics; used on the HTTP thread.
  std::unique_ptr<procmetrics::ProcessCollector> process_;
  HttpServer http_;
  std::thread thread_;
  absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace vigil::remediator
