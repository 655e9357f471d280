// The API module: conversions between the field value types (fields/) and vigil.v1 messages,
// and the proto-only helpers every client uses to read them. It knows nothing of the engine, so
// clients can use it without linking one. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "fields/gpu_process.h"
#include "fields/nic_port_entity.h"
#include "fields/value.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

v1::ValueStatus ToProto(ValueStatus status);
void ToProto(const NicPortEntity& port, v1::NicPort* out);
// GPU `gpu`'s process list; unknown values (memory, SM share) as -1.
void ToProto(uint32_t gpu, const GpuProcessList& list, v1::GpuProcesses* out);
// The inverse; an unknown wire value (a newer engine) reads as kReadError.
ValueStatus FromProto(v1::ValueStatus status);
v1::FieldType ToProto(FieldType type);

// Sets status, injected and (when ok) the value of a v1::FieldValue or v1::Sample.
void SetValue(const FieldValue& value, v1::FieldValue* out);
void SetValue(const FieldValue& value, v1::Sample* out);

// A health status as people and dashboards read it: "PASS", "WARN", "FAIL", "UNKNOWN" (also for
// an unset or unknown wire value), and as dcgm-exporter's health metric values 0, 10, 20 — with
// -1 for UNKNOWN, which dcgm-exporter has no value for.
std::string_view HealthStatusText(v1::HealthStatus status);
int HealthStatusNumber(v1::HealthStatus status);
// "none", "restart-app", "reset-gpu", "reboot", "inspect" ("" when unspecified).
std::string_view RecommendedActionText(v1::RecommendedAction action);
// An injection's mode and a scenario's state as the CLI prints them: "value", "add", "xid";
// "running", "done", "cancelled", "failed" ("unknown" for an unset or newer value).
std::string_view InjectionModeText(v1::InjectionMode mode);
std::string_view ScenarioStateText(v1::Scenario::State state);
// "off", "reading", "absent", "unreadable".
std::string_view KernelLogStateText(v1::KernelLogState state);
// An XID severity as the engine's policy names it: "ignore", "warn", "fail", "count" ("unknown"
// for an unset or newer value).
std::string_view XidSeverityText(v1::XidSeverity severity);

}  // namespace vigil
