// Implements the health conversions.
#include "engine/health_proto.h"

#include <algorithm>

namespace vigil {

v1::HealthStatus ToProto(HealthStatus status) {
  switch (status) {
    case HealthStatus::kPass:
      return v1::HEALTH_STATUS_PASS;
    case HealthStatus::kWarn:
      return v1::HEALTH_STATUS_WARN;
    case HealthStatus::kFail:
      return v1::HEALTH_STATUS_FAIL;
    case HealthStatus::kUnknown:
      return v1::HEALTH_STATUS_UNKNOWN;
  }
  return v1::HEALTH_STATUS_UNSPECIFIED;
}

void ToProto(const Incident& incident, v1::HealthIncident* out) {
  out->set_gpu(incident.gpu);
  out->set_uuid(incident.uuid);
  out->set_system(std::string(HealthSystemName(incident.system)));
  out->set_status(ToProto(incident.status));
  out->set_code(incident.code);
  out->set_message(incident.message);
  out->set_action(incident.action);
  out->set_first_seen_us(absl::ToUnixMicros(incident.first_seen));
  out->set_last_seen_us(absl::ToUnixMicros(incident.last_seen));
  out->set_count(incident.count);
  out->set_injected(incident.injected);
}

void ToProto(const HealthVerdict& verdict, const std::string& instance_id,
             const std::vector<uint32_t>& gpus, v1::HealthVerdict* out) {
  out->set_instance_id(instance_id);
  out->set_seq(verdict.seq);
  out->set_timestamp_us(verdict.seq == 0 ? 0 : absl::ToUnixMicros(verdict.time));
  HealthStatus overall = HealthStatus::kPass;
  for (const GpuHealth& gpu : verdict.gpus) {
    if (!gpus.empty() && std::find(gpus.begin(), gpus.end(), gpu.gpu) == gpus.end()) continue;
    overall = Worst(overall, gpu.status);
    v1::GpuHealth* gpu_out = out->add_gpus();
    gpu_out->set_gpu(gpu.gpu);
    gpu_out->set_uuid(gpu.uuid);
    gpu_out->set_status(ToProto(gpu.status));
    for (const SystemHealth& system : gpu.systems) {
      v1::SystemHealth* system_out = gpu_out->add_systems();
      system_out->set_system(std::string(HealthSystemName(system.system)));
      system_out->set_status(ToProto(system.status));
      system_out->set_unknown_reason(system.unknown_reason);
      for (const Incident& incident : system.incidents)
        ToProto(incident, system_out->add_incidents());
    }
  }
  out->set_overall(ToProto(overall));
}

void ToProto(const HealthTransition& transition, v1::HealthTransition* out) {
  out->set_gpu(transition.gpu);
  out->set_uuid(transition.uuid);
  out->set_system(std::string(HealthSystemName(transition.system)));
  out->set_from(ToProto(transition.from));
  out->set_to(ToProto(transition.to));
  out->set_summary(transition.summary);
  out->set_injected(transition.injected);
}

}  // namespace vigil
