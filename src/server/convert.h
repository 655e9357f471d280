// The one place where the engine's model (snapshots, health verdicts, events, injections,
// scenarios) becomes vigil.v1 messages, for the service's handlers and the tick encoder. The
// field value conversions it builds on are api/convert.h's. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "engine/events.h"
#include "health/evaluator.h"
#include "inject/scenario_runner.h"
#include "sampling/snapshot.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

v1::HealthStatus ToProto(HealthStatus status);
void ToProto(const Incident& incident, v1::HealthIncident* out);
void ToProto(const SystemHealth& system, v1::SystemHealth* out);
v1::RecommendedAction ToProto(RecommendedAction action);
// The verdict restricted to `gpus` (empty: all), with `overall` the worst of those.
void ToProto(const HealthVerdict& verdict, const std::string& instance_id,
             const std::vector<uint32_t>& gpus, v1::HealthVerdict* out);
void ToProto(const HealthTransition& transition, v1::HealthTransition* out);

void ToProto(const Snapshot::Counters& counters, v1::EngineCounters* out);
// Appends the latest value of each (gpu, field index), GPU-major, to `out`; with
// include_mig_instances, each GPU's values are followed by those of its MIG GPU instances (the
// fields sampled per instance, gpu_instance set).
// The compute processes of `gpus` (all when empty) as `snapshot` last read them; nothing before
// the engine's first read.
void AppendProcesses(const Snapshot& snapshot, const std::vector<uint32_t>& gpus,
                     google::protobuf::RepeatedPtrField<v1::GpuProcesses>* out);
void AppendValues(const Snapshot& snapshot, const std::vector<uint32_t>& gpus,
                  const std::vector<size_t>& fields, bool include_mig_instances,
                  google::protobuf::RepeatedPtrField<v1::FieldValue>* out);

v1::Principal ToProto(const Principal& principal);
v1::Injection ToProto(const InjectionRecord& record);
v1::InjectionMode ToProto(InjectionMode mode);
v1::Scenario::State ToProto(ScenarioRun::State state);
v1::Scenario ToProto(const ScenarioRun& scenario);
v1::Event::Kind ToProto(EventKind kind);
void ToProto(const EngineEvent& event, const std::string& instance_id, v1::Event* out);
v1::XidSeverity ToProto(XidRule::Severity severity);
// The policy's rule for one code; `known`: the policy lists the code (else it is the rule for
// unknown codes, and the meaning stays empty).
void ToProto(const XidRule& rule, bool known, v1::XidInfo* out);

}  // namespace vigil
