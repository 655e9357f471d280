// The passive health check's view of its node's engine: follows the engine's health stream, and
// turns it into what the cluster acts on — a status that is never "the GPU is fine" or "the GPU is
// broken" when the engine cannot be seen, and never another node's GPUs.
//
// - Node identity: when both sides know their node name and they differ (a Service without
//   internalTrafficPolicy: Local routed us to another node's engine), the view is refused: not
//   ready, a loud error, vigil_healthcheck_node_mismatch 1.
// - Engine unreachable or silent: status UNKNOWN, not ready; the last verdict is still shown, as
//   stale, with its age.
// Threading: one thread follows the engine; the accessors are thread-safe (one mutex).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/convert.h"
#include "client/engine_client.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace vigil {

// What the health check believes now.
struct HealthView {
  std::string node_name;  // our node
  std::string engine_address;
  bool connected = false;  // receiving the engine's health stream
  bool node_mismatch = false;
  std::string problem;  // why not ready ("" when ready)
  std::string engine_instance_id, engine_node;
  bool have_verdict = false;
  v1::HealthVerdict verdict;  // the last one received (maybe stale)
  absl::Time received = absl::InfinitePast();
  absl::Duration fresh_for = absl::Seconds(3);  // a verdict older than this is stale
  // The engine's GPUs with their MIG instances (ListGpus), listed again for a new engine
  // instance or MIG layout; empty until listed.
  std::vector<v1::Gpu> gpus;
  std::string gpus_instance_id;
  uint64_t gpus_mig_generation = 0;

  bool fresh(absl::Time now) const {
    return connected && !node_mismatch && have_verdict && now - received <= fresh_for;
  }
  // The overall status to act on: the verdict's when fresh, UNKNOWN otherwise.
  v1::HealthStatus status(absl::Time now) const {
    return fresh(now) ? verdict.overall() : v1::HEALTH_STATUS_UNKNOWN;
  }
};

class HealthMonitor {
 public:
  // `on_change` (may be null) is called from the follow thread after each update of the view;
  // it must not block.
  // `clock` (not owned) times the verdicts' freshness.
  HealthMonitor(std::unique_ptr<EngineClient> client, std::string node_name, Clock* clock,
                std::function<void()> on_change);
  ~HealthMonitor();

  void Start();
  void Stop();

  HealthView View() const;
  // /status as JSON, /readyz's answer, and /metrics, from the same view.
  nlohmann::json StatusJson() const;
  bool Ready(std::string* why) const;
  std::string Metrics() const;

 private:
  void Follow();
  void Update(const std::function<void(HealthView&)>& change);

  std::unique_ptr<EngineClient> client_;
  Clock* const clock_;
  std::function<void()> on_change_;
  std::thread thread_;

  mutable absl::Mutex mutex_;
  HealthView view_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  HealthSubscription* stream_ ABSL_GUARDED_BY(mutex_) = nullptr;
  // Counted inside Update()'s change (under mutex_, which the analysis cannot see through the
  // std::function), read by the metrics: an atomic needs no lock.
  std::atomic<uint64_t> reconnects_{0};
};

}  // namespace vigil
