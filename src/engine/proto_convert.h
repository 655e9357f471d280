// Conversions between the engine's values and vigil.v1 messages, shared by the service (unary
// handlers, subscription encoder) and the clients. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/snapshot.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

v1::ValueStatus ToProto(ValueStatus status);
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

void ToProto(const Snapshot::Counters& counters, v1::EngineCounters* out);

// Appends the latest value of each (gpu, field index), GPU-major, to `out`.
void AppendValues(const Snapshot& snapshot, const std::vector<uint32_t>& gpus,
                  const std::vector<size_t>& fields,
                  google::protobuf::RepeatedPtrField<v1::FieldValue>* out);

}  // namespace vigil
