// Conversions of health verdicts and transitions to vigil.v1 messages, for the service and the
// subscription encoder. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "engine/health.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

v1::HealthStatus ToProto(HealthStatus status);
void ToProto(const Incident& incident, v1::HealthIncident* out);
// The verdict restricted to `gpus` (empty: all), with `overall` the worst of those.
void ToProto(const HealthVerdict& verdict, const std::string& instance_id,
             const std::vector<uint32_t>& gpus, v1::HealthVerdict* out);
void ToProto(const HealthTransition& transition, v1::HealthTransition* out);

}  // namespace vigil
