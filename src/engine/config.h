// The engine's configuration file (`vigil engine --config FILE`, YAML): sampling cadence,
// history retention, per-field intervals and subscriber queues. Later sections (injection,
// health) extend the same file. A plain value type; parsing is a pure function.
//
//   sampling:
//     tick_interval: 1s          # how often the engine ticks (10ms .. 60s)
//     history_max_age: 24h       # how long samples are kept (1m .. 24h)
//     gpu_read_timeout: 500ms    # a GPU whose driver call takes longer reads as timed out
//                                # (nvml backend; 1ms .. tick_interval; default 500ms or the
//                                # tick interval if shorter)
//     intervals:                 # per-field overrides of the catalogue's defaults
//       DCGM_FI_DEV_POWER_USAGE: 500ms
//       310: 10s
//   subscribers:
//     queue_depth: 16            # ticks queued per slow subscriber before dropping (1 .. 1024)
//   injection:
//     allowed_uids: [1000]       # besides root, who may inject over the Unix socket
//     default_duration: 60s      # when a request gives none
//     max_duration: 1h           # the longest an injection may last (1s .. 24h)
//   health:                      # thresholds and the XID policy: see docs/health.md
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backend/mig.h"
#include "fields/value.h"
#include "health/policy.h"
#include "inject/injection.h"

namespace vigil {

struct EngineConfig {
  absl::Duration tick_interval = absl::Seconds(1);
  absl::Duration history_max_age = absl::Hours(24);
  std::map<FieldId, absl::Duration> interval_overrides;
  absl::Duration gpu_read_timeout = absl::ZeroDuration();  // zero: the default
  size_t subscriber_queue_depth = 16;

  // gpu_read_timeout, or its default: 500ms, or the tick interval if that is shorter.
  absl::Duration EffectiveGpuReadTimeout() const {
    if (gpu_read_timeout > absl::ZeroDuration()) return gpu_read_timeout;
    return std::min(absl::Milliseconds(500), tick_interval);
  }
  InjectionLimits injection;
  std::vector<uint32_t> injection_allowed_uids;
  HealthPolicy health = DefaultHealthPolicy();
  // sim.mig: the simulated GPUs in MIG mode (as --mig; --backend sim only).
  std::vector<MigLayout> sim_mig;
};

// Bounds, also used to validate flags.
inline constexpr absl::Duration kMinTickInterval = absl::Milliseconds(10);
inline constexpr absl::Duration kMaxTickInterval = absl::Seconds(60);
inline constexpr absl::Duration kMinHistoryAge = absl::Minutes(1);
inline constexpr absl::Duration kMaxHistoryAge = absl::Hours(24);
inline constexpr absl::Duration kMaxFieldInterval = absl::Hours(1);
inline constexpr size_t kMaxSubscriberQueueDepth = 1024;
inline constexpr absl::Duration kMinGpuReadTimeout = absl::Milliseconds(1);

// `source` names the document in errors ("engine.yaml:7: sampling.intervals: ...").
absl::StatusOr<EngineConfig> ParseEngineConfig(std::string_view yaml_text, std::string_view source);
absl::StatusOr<EngineConfig> LoadEngineConfig(const std::string& path);

}  // namespace vigil
