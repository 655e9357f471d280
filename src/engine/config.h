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
//   network:                     # the NIC ports: intervals, port -> GPU overrides, rules (see
//                                # health/network_policy.h and docs/health.md)
//   flight_recorder:             # what a GPU did around its turn to FAIL, to the state dir
//     window: 15m                # before the FAIL (1m .. 1h)
//     after: 2m                  # after it (0s .. 30m)
//     max_recordings: 20         # the oldest go first (0: no recordings; at most 1000)
//     max_size_mib: 256          # all recordings together (1 .. 65536)
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
#include "common/principal.h"
#include "fields/value.h"
#include "health/network_policy.h"
#include "health/policy.h"
#include "inject/injection.h"

namespace vigil {

// The flight recorder (recorder/flight_recorder.h): recordings of every field of a GPU over
// `window` before its verdict turned FAIL and `after` it.
struct FlightRecorderConfig {
  absl::Duration window = absl::Minutes(15);
  absl::Duration after = absl::Minutes(2);
  size_t max_recordings = 20;  // 0: off
  uint64_t max_bytes = uint64_t{256} << 20;
};

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
  // tls_clients: what each client certificate may do over mutual TLS (server/authz.h).
  std::vector<TlsClientGrant> tls_clients;
  HealthPolicy health = DefaultHealthPolicy();
  NetworkPolicy network = DefaultNetworkPolicy();
  // sim.mig: the simulated GPUs in MIG mode (as --mig; --backend sim only).
  std::vector<MigLayout> sim_mig;
  FlightRecorderConfig flight_recorder;
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
