// The node's side of remediation (`vigil healthcheck --remediation`): the hand-off between the
// cluster's remediator, which decides, and the node's engine, the only process that touches GPUs.
// - Says what the node publishes as its FAIL incidents (FaultsOf) — GPU, system, code, recommended
//   action, whether a drill injected it and allowed actions — with the pods the kubelet gave each
//   failing GPU (its pod-resources API), for the vigil.dev/gpu-faults annotation; the node
//   reporter writes it (node_reporter.h), in the same request as a taint it adds, so a transition
//   costs one node write and never conflicts with itself.
// - Relays the remediator's vigil.dev/reset-request to the engine's ResetGpu (a privileged call:
//   the check's engine client needs root over the Unix socket or the engine's token over TCP) and
//   answers with vigil.dev/reset-result; a vigil.dev/reboot-request writes the reboot sentinel
//   that kured watches (--reboot-sentinel) and answers with vigil.dev/reboot-result. Each request
//   id is answered once: a restarted check reads the answer already on the node and does not act
//   again.
// Reads its node from the node reporter's informer cache (no request of its own to read it);
// writes are merge patches of its own result keys, so they never clobber the remediator's.
// Threads: its own (`vigil-relay`, after Start()), which may wait for a reset (up to the engine's
// limit) without holding up the node condition, which the reporter's thread keeps.
// Thread-safety: Wake() and stats() from any thread; RelayOnce() from one thread at a time (the
// relay's own after Start(), or a test's).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "api/remediation.h"
#include "client/engine_client.h"
#include "common/clock.h"
#include "healthcheck/monitor.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"
#include "podresources/pod_info.h"

namespace vigil {

struct RelayOptions {
  std::string node_name;
  // Where a reboot request writes the reboot-required sentinel ("" : reboot requests are answered
  // failed, saying so).
  std::string reboot_sentinel;
  Clock* clock = Clock::Real();
};

struct RelayStats {
  std::atomic<uint64_t> resets_done{0}, resets_refused{0}, resets_failed{0};
  std::atomic<uint64_t> reboots_requested{0}, reboots_failed{0};
  std::atomic<uint64_t> api_errors{0};
};

class RemediationRelay {
 public:
  // This node's object as the reporter's informer holds it (annotations included); nullopt when
  // it has none yet.
  using NodeSource = std::function<std::optional<nlohmann::json>()>;
  // `api` (not owned) outlives the relay; `engine` (owned) may reset GPUs.
  RemediationRelay(RelayOptions options, kube::KubeApi* api, std::unique_ptr<EngineClient> engine,
                   NodeSource node);
  ~RemediationRelay();

  void Start();
  void Stop();
  // The verdict or the node may have changed: relay soon.
  void Wake();
  // One pass: answer a request not yet answered.
  absl::Status RelayOnce();
  const RelayStats& stats() const { return stats_; }

  // The faults of a verdict as published (FAIL incidents only; the pods of the failing GPUs when
  // `pods` has them: those given the GPU and those given one of its MIG devices, view.gpus'
  // instances).
  static PublishedFaults FaultsOf(const HealthView& view, const std::optional<GpuPodMap>& pods);

 private:
  void Loop();
  absl::Status Patch(const nlohmann::json& annotations, std::string_view what);
  // Answers a reset request (calls the engine: may take a minute).
  ActionResult Reset(const ActionRequest& request);
  ActionResult Reboot(const ActionRequest& request);

  const RelayOptions options_;
  kube::KubeApi* const api_;
  const std::unique_ptr<EngineClient> engine_;
  const NodeSource node_;
  RelayStats stats_;
  std::thread thread_;

  absl::Mutex mutex_;
  bool dirty_ ABSL_GUARDED_BY(mutex_) = true;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;

  // Owned by the relaying thread.
  std::string answered_reset_, answered_reboot_;  // request ids answered by this process
  // The outcome of a request acted on whose answer could not be written yet.
  std::optional<ActionResult> unwritten_reset_, unwritten_reboot_;
};

}  // namespace vigil
