// Injection scenarios: a timeline of injections, XIDs and clears, written in YAML, validated
// completely before anything is applied (errors name the file and line), then run by the engine
// itself so that it continues if the client that started it goes away.
//
//   name: power-instability
//   description: Power draw on GPU 2 swings, then the GPU falls off the bus.
//   steps:
//     - at: 0s
//       inject: {gpu: 2, field: DCGM_FI_DEV_POWER_USAGE, value: 950, for: 20s}
//     - at: 5s
//       inject: {gpu: 2, field: DCGM_FI_DEV_POWER_VIOLATION, add: 4000000000, for: 60s}
//     - at: 10s
//       xid: {gpu: 2, xid: 79}
//     - at: 30s
//       clear: all                     # or: clear: {gpu: 2, field: DCGM_FI_DEV_POWER_USAGE}
//
// A NIC port's field is named by `port` instead of `gpu` (`inject: {port: mlx5_3/1, field: state,
// value: 1, for: 20s}`, `clear: {port: mlx5_3/1, field: state}`): a port that flaps is a timeline
// of such steps. The engine's check_port says which ports and fields it has.
//
// Parsing is a pure function; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fields/value.h"
#include "inject/injection.h"

namespace vigil {

struct ScenarioStep {
  enum class Action { kInjectField, kInjectXid, kClearAll, kClearField, kInjectPort, kClearPort };
  absl::Duration at;
  int line = 0;  // in the scenario file, for messages
  Action action = Action::kInjectField;
  uint32_t gpu = 0;
  FieldId field = 0;
  std::optional<double> value;
  std::optional<int64_t> add;
  absl::Duration duration = absl::ZeroDuration();  // 0: the engine's default
  uint32_t xid = 0;
  std::string port;        // kInjectPort, kClearPort: "mlx5_3/1"
  std::string port_field;  // "state", "link_downed"
};

struct ScenarioPlan {
  std::string name;
  std::string description;
  std::vector<ScenarioStep> steps;  // ordered by `at` (stable for equal times)
  absl::Duration length;            // the last step's `at`
};

struct ScenarioLimits {
  uint32_t gpu_count = 0;
  absl::Duration max_injection = absl::Hours(1);
  absl::Duration max_length = absl::Hours(24);
  size_t max_steps = 1000;
  // Whether a NIC port step's port, field and change are the engine's to inject (its message
  // says why not); unset: the engine reads no NIC ports, and port steps are refused.
  std::function<absl::Status(const PortInjectionRequest&)> check_port;
};

// InvalidArgument "SOURCE:LINE: PATH: problem" for anything wrong: syntax, unknown keys, unknown
// fields, GPUs out of range, wrong value types, `add` on a non-counter, negative or too long
// times, no steps, NIC ports or port fields check_port refuses.
absl::StatusOr<ScenarioPlan> ParseScenario(std::string_view yaml_text, std::string_view source,
                                           const ScenarioLimits& limits);

}  // namespace vigil
