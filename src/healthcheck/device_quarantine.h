// Per-GPU quarantine: one failing GPU leaves the scheduler's service, not its node. For each GPU
// that FAILs (an actionable GPU-level incident) and is a DRA device (dra/dra_devices.h),
// one DeviceTaintRule taints that device (`vigil.dev/gpu-fail`, value the incident code, effect
// NoSchedule by default; NoExecute, which deletes pods without honouring PodDisruptionBudgets,
// only on request), so the other GPUs of the node stay schedulable. The rule is named after the
// node and the device (one per device: a create that finds it is done), labelled with the node,
// the GPU's UUID and the engine instance, and removed after the GPU has not failed for
// `untaint_after` — the node taint's hysteresis. Rules this check made are found again at start
// by their node label, so a restart neither forgets nor duplicates them.
//
// What the node taint still covers (CoversEvery() false): node-level failures, a GPU that is not a
// DRA device, a cluster that serves no DeviceTaintRules, and a GPU whose rule the API refused
// (422: logged with its cause) — a failing GPU is never left schedulable.
//
// The resource.k8s.io version DeviceTaintRules are served in is discovered: v1 (Kubernetes
// 1.37), v1beta2 (1.36), v1alpha3 (1.33 to 1.38).
// Threads: its own (`vigil-quarantine`: woken by Wake(), and every second for the hysteresis);
// CoversEvery(), StatusJson() and stats() from any thread (one mutex, never held across a request).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/remediation.h"
#include "common/clock.h"
#include "dra/dra_devices.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"
#include "vigil/v1/engine.pb.h"

namespace vigil {

// --quarantine: what a GPU-level failure takes out of service.
enum class QuarantineMode : uint8_t {
  kAuto,  // the GPU where the node's GPUs are DRA devices, else the node
  kGpu,   // the GPU (a GPU that is not a DRA device: the node)
  kNode,  // the node (the NoSchedule node taint, as before per-GPU quarantine)
};
// InvalidArgument, with one line saying what is accepted, for another value.
absl::StatusOr<QuarantineMode> ParseQuarantineMode(std::string_view text);
std::string_view QuarantineModeName(QuarantineMode mode);

struct DeviceQuarantineOptions {
  std::string node_name;
  QuarantineMode mode = QuarantineMode::kAuto;
  std::string taint_key = std::string(kDeviceTaintKey);
  std::string effect = "NoSchedule";  // or "NoExecute" (--device-taint-effect)
  absl::Duration untaint_after = absl::Minutes(5);
  Clock* clock = Clock::Real();
  // Where the Node Events of each quarantine, release and refusal go (the audit trail).
  std::string event_namespace = "default";
  // Called on the quarantine's thread after a rule was made, removed or refused (what the node
  // taint must cover changed); must not block. May be null.
  std::function<void()> on_change;
  // Why the tainted-share circuit breaker refuses a new quarantine now (the remediator's
  // published breaker, open), or nullopt; must not block. May be null (never refuses). A GPU so
  // refused is left to the node taint, which the same breaker refuses.
  std::function<std::optional<std::string>()> breaker_refusal;
};

// A GPU to take out of service: an actionable FAIL of the GPU itself.
struct FailingGpu {
  uint32_t gpu = 0;
  std::string uuid;
  std::string code;  // the first FAIL incident's, DCGM_FR_*
};
// The GPUs of a fresh verdict that FAIL with at least one incident that may drive an action.
std::vector<FailingGpu> FailingGpusOf(const v1::HealthVerdict& verdict);

struct DeviceQuarantineStats {
  std::atomic<uint64_t> rules_created{0};
  std::atomic<uint64_t> rules_deleted{0};
  std::atomic<uint64_t> rules_refused{0};  // 422: the node taint covers the GPU instead
  std::atomic<uint64_t> api_errors{0};
  std::atomic<uint64_t> events{0};
};

class DeviceQuarantine {
 public:
  // The health check's view now: its GPUs, and the verdict's failing GPUs (nullopt: no fresh
  // verdict, change nothing). Called on the quarantine's thread; must not block.
  struct Input {
    std::vector<v1::Gpu> gpus;
    std::optional<std::vector<FailingGpu>> failing;
    std::string engine_instance;
  };
  using InputSource = std::function<Input()>;

  // `api`, `devices` (not owned) outlive this.
  DeviceQuarantine(DeviceQuarantineOptions options, kube::KubeApi* api, const DraDevices* devices,
                   InputSource input);
  ~DeviceQuarantine();

  void Start();
  void Stop();
  void Wake();
  // One pass (the thread's, or a test's): discover, adopt, create and remove rules.
  absl::Status ReconcileOnce();

  // Whether DeviceTaintRules take (or are about to take) every one of `failing` out of service, so
  // the node needs no taint for them. Non-blocking: answered from the device map's cache (read
  // once) and the last pass.
  bool CoversEvery(const std::vector<v1::Gpu>& gpus, const std::vector<FailingGpu>& failing) const;
  // Per-GPU quarantine is in force: the mode asks for it, the node's GPUs are DRA devices and the
  // API serves DeviceTaintRules.
  bool Active() const;
  // The GPUs this check's rules take out of service now (what it publishes for the remediator).
  std::vector<QuarantinedDevice> Quarantined() const;
  nlohmann::json StatusJson() const;
  const DeviceQuarantineStats& stats() const { return stats_; }
  const DeviceQuarantineOptions& options() const { return options_; }

 private:
  // A rule this check holds, by device name.
  struct Rule {
    std::string name;  // the object's
    std::string uuid;  // the GPU's
    std::string driver, pool;
    std::string code;
    absl::Time healthy_since = absl::InfinitePast();  // the GPU not failing since
  };
  void Run();
  absl::Status Discover();
  absl::Status Adopt();
  absl::Status Create(const dra::Device& device, const FailingGpu& failing,
                      const std::string& engine_instance);
  absl::Status Delete(const std::string& device);
  // Records and tells (Event GpuQuarantineRefused) that the breaker refused `failing`'s rule.
  void RefuseByBreaker(const dra::Device& device, const FailingGpu& failing,
                       const std::string& why);
  std::string RulesPath() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  static std::string RuleName(const std::string& node, const std::string& device);
  // Posts a Node Event (best effort: a failure is counted and logged, not retried).
  void PostEvent(std::string_view type, std::string_view reason, std::string message);

  const DeviceQuarantineOptions options_;
  kube::KubeApi* const api_;
  const DraDevices* const devices_;
  const InputSource input_;
  DeviceQuarantineStats stats_;
  std::thread thread_;

  mutable absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  bool woken_ ABSL_GUARDED_BY(mutex_) = false;
  std::string rule_version_ ABSL_GUARDED_BY(mutex_);  // "" until discovered
  bool no_rule_api_ ABSL_GUARDED_BY(mutex_) = false;  // the cluster serves no DeviceTaintRules
  bool adopted_ ABSL_GUARDED_BY(mutex_) = false;
  std::map<std::string, Rule> rules_ ABSL_GUARDED_BY(mutex_);  // by device name
  // GPUs (by UUID) whose rule the API refused, with its answer; until the GPU stops failing.
  std::map<std::string, std::string> refused_ ABSL_GUARDED_BY(mutex_);
  std::string last_error_ ABSL_GUARDED_BY(mutex_);
  uint64_t events_posted_ = 0;  // quarantine thread only: makes Event names unique
};

}  // namespace vigil
