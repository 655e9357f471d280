// Implements the model-to-proto conversions.
#include "server/convert.h"

#include <algorithm>

#include "api/convert.h"

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
  out->set_node(incident.node_level);
  out->set_actions_allowed(incident.actions_allowed);
  out->set_recommended_action(ToProto(incident.recommended));
}

v1::RecommendedAction ToProto(RecommendedAction action) {
  switch (action) {
    case RecommendedAction::kNone:
      return v1::RECOMMENDED_ACTION_NONE;
    case RecommendedAction::kRestartApp:
      return v1::RECOMMENDED_ACTION_RESTART_APP;
    case RecommendedAction::kResetGpu:
      return v1::RECOMMENDED_ACTION_RESET_GPU;
    case RecommendedAction::kReboot:
      return v1::RECOMMENDED_ACTION_REBOOT;
    case RecommendedAction::kInspect:
      return v1::RECOMMENDED_ACTION_INSPECT;
  }
  return v1::RECOMMENDED_ACTION_UNSPECIFIED;
}

void ToProto(const SystemHealth& system, v1::SystemHealth* out) {
  out->set_system(std::string(HealthSystemName(system.system)));
  out->set_status(ToProto(system.status));
  out->set_unknown_reason(system.unknown_reason);
  for (const Incident& incident : system.incidents) ToProto(incident, out->add_incidents());
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
    for (const SystemHealth& system : gpu.systems) ToProto(system, gpu_out->add_systems());
  }
  for (const SystemHealth& system : verdict.node_systems) {
    overall = Worst(overall, system.status);
    ToProto(system, out->add_node_systems());
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
  out->set_node(transition.node_level);
}

void AppendProcesses(const Snapshot& snapshot, const std::vector<uint32_t>& gpus,
                     google::protobuf::RepeatedPtrField<v1::GpuProcesses>* out) {
  if (snapshot.processes == nullptr) return;
  const auto add = [&](uint32_t gpu) {
    if (gpu < snapshot.processes->size()) ToProto(gpu, (*snapshot.processes)[gpu], out->Add());
  };
  if (gpus.empty()) {
    for (uint32_t gpu = 0; gpu < snapshot.processes->size(); ++gpu) add(gpu);
  } else {
    for (uint32_t gpu : gpus) add(gpu);
  }
}

void AppendValues(const Snapshot& snapshot, const std::vector<uint32_t>& gpus,
                  const std::vector<size_t>& fields, bool include_mig_instances,
                  google::protobuf::RepeatedPtrField<v1::FieldValue>* out) {
  const auto add = [&](uint32_t gpu, size_t index, const LatestValue& latest) {
    v1::FieldValue* value = out->Add();
    value->set_gpu(gpu);
    value->set_field_id(snapshot.layout->field(index).id);
    SetValue(latest.value, value);
    value->set_sample_seq(latest.sample_seq);
    value->set_timestamp_us(latest.sample_seq == 0 ? 0 : absl::ToUnixMicros(latest.sample_time));
    return value;
  };
  // The requested fields sampled per GPU instance, with their k among the instance fields.
  std::vector<std::pair<size_t, size_t>> instance_fields;
  if (include_mig_instances && snapshot.instance_fields != nullptr) {
    const std::vector<size_t>& sampled = *snapshot.instance_fields;  // ascending
    for (size_t index : fields) {
      auto it = std::lower_bound(sampled.begin(), sampled.end(), index);
      if (it != sampled.end() && *it == index)
        instance_fields.emplace_back(index, it - sampled.begin());
    }
  }
  out->Reserve(static_cast<int>(gpus.size() * fields.size()));
  for (uint32_t gpu : gpus) {
    for (size_t index : fields) add(gpu, index, snapshot.at(gpu, index));
    if (instance_fields.empty()) continue;
    const MigState& state = snapshot.mig->gpus[gpu];
    for (size_t position = 0; position < state.instances.size(); ++position) {
      const size_t row = snapshot.mig->first_row[gpu] + position;
      for (const auto& [index, k] : instance_fields) {
        add(gpu, index, snapshot.instance_at(row, k))
            ->set_gpu_instance(state.instances[position].gpu_instance_id);
      }
    }
  }
}

void ToProto(const Snapshot::Counters& counters, v1::EngineCounters* out) {
  out->set_ticks(counters.ticks);
  out->set_gpu_read_failures(counters.gpu_read_failures);
  out->set_gpu_read_timeouts(counters.gpu_read_timeouts);
  out->set_xid_events(counters.xid_events);
  out->set_xid_duplicates(counters.xid_duplicates);
  out->set_process_read_failures(counters.process_read_failures);
  using KernelLog = Snapshot::Counters::KernelLog;
  switch (counters.kernel_log) {
    case KernelLog::kOff:
      out->set_kernel_log(v1::KERNEL_LOG_OFF);
      break;
    case KernelLog::kReading:
      out->set_kernel_log(v1::KERNEL_LOG_READING);
      break;
    case KernelLog::kAbsent:
      out->set_kernel_log(v1::KERNEL_LOG_ABSENT);
      break;
    case KernelLog::kUnreadable:
      out->set_kernel_log(v1::KERNEL_LOG_UNREADABLE);
      break;
  }
  out->set_kernel_log_xids(counters.kernel_log_xids);
  out->set_kernel_log_unknown_gpu(counters.kernel_log_unknown_gpu);
  out->set_kernel_log_overwritten(counters.kernel_log_overwritten);
  out->set_kernel_log_source(counters.kernel_log_source);
  out->set_persistence_pending(counters.persistence_pending);
  out->set_persistence_lag_us(absl::ToInt64Microseconds(counters.persistence_lag));
  out->set_persistence_failures(counters.persistence_failures);
}

v1::Principal ToProto(const Principal& principal) {
  v1::Principal out;
  out.set_transport(principal.transport);
  out.set_uid(principal.uid);
  out.set_pid(principal.pid);
  out.set_description(principal.description);
  return out;
}

v1::Injection ToProto(const InjectionRecord& record) {
  v1::Injection out;
  out.set_id(record.id);
  out.set_gpu(record.gpu);
  out.set_field_id(record.field);
  out.set_xid(record.xid);
  out.set_mode(ToProto(record.mode));
  out.set_value(record.mode == InjectionMode::kAdd ? static_cast<double>(record.add)
                                                   : record.value.numeric());
  *out.mutable_principal() = ToProto(record.principal);
  out.set_start_time_us(absl::ToUnixMicros(record.start));
  out.set_expire_time_us(record.mode == InjectionMode::kXid ? 0
                                                            : absl::ToUnixMicros(record.expire));
  out.set_scenario_id(record.scenario_id);
  out.set_allow_actions(record.allow_actions);
  out.set_nic_port(record.nic_port);
  out.set_port_field(record.port_field);
  return out;
}

v1::InjectionMode ToProto(InjectionMode mode) {
  switch (mode) {
    case InjectionMode::kValue:
      return v1::INJECTION_MODE_VALUE;
    case InjectionMode::kAdd:
      return v1::INJECTION_MODE_ADD;
    case InjectionMode::kXid:
      return v1::INJECTION_MODE_XID;
  }
  return v1::INJECTION_MODE_UNSPECIFIED;
}

v1::Scenario::State ToProto(ScenarioRun::State state) {
  switch (state) {
    case ScenarioRun::State::kRunning:
      return v1::Scenario::RUNNING;
    case ScenarioRun::State::kDone:
      return v1::Scenario::DONE;
    case ScenarioRun::State::kCancelled:
      return v1::Scenario::CANCELLED;
    case ScenarioRun::State::kFailed:
      return v1::Scenario::FAILED;
  }
  return v1::Scenario::STATE_UNSPECIFIED;
}

v1::Scenario ToProto(const ScenarioRun& scenario) {
  v1::Scenario out;
  out.set_id(scenario.id);
  out.set_name(scenario.plan.name);
  *out.mutable_principal() = ToProto(scenario.principal);
  out.set_start_time_us(absl::ToUnixMicros(scenario.start));
  out.set_duration_us(absl::ToInt64Microseconds(scenario.plan.length));
  out.set_steps(static_cast<uint32_t>(scenario.plan.steps.size()));
  out.set_steps_done(static_cast<uint32_t>(scenario.steps_done));
  out.set_state(ToProto(scenario.state));
  out.set_error(scenario.error);
  return out;
}

v1::Event::Kind ToProto(EventKind kind) {
  switch (kind) {
    case EventKind::kXid:
      return v1::Event::XID;
    case EventKind::kInjectionStarted:
      return v1::Event::INJECTION_STARTED;
    case EventKind::kInjectionExpired:
      return v1::Event::INJECTION_EXPIRED;
    case EventKind::kInjectionCleared:
      return v1::Event::INJECTION_CLEARED;
    case EventKind::kScenarioStarted:
      return v1::Event::SCENARIO_STARTED;
    case EventKind::kScenarioStep:
      return v1::Event::SCENARIO_STEP;
    case EventKind::kScenarioEnded:
      return v1::Event::SCENARIO_ENDED;
    case EventKind::kHealthTransition:
      return v1::Event::HEALTH_TRANSITION;
    case EventKind::kHealthCleared:
      return v1::Event::HEALTH_CLEARED;
    case EventKind::kGpuReset:
      return v1::Event::GPU_RESET;
    case EventKind::kSxid:
      return v1::Event::SXID;
    case EventKind::kMigLayoutChanged:
      return v1::Event::MIG_LAYOUT_CHANGED;
  }
  return v1::Event::KIND_UNSPECIFIED;
}

void ToProto(const EngineEvent& event, const std::string& instance_id, v1::Event* out) {
  out->set_id(event.id);
  out->set_instance_id(instance_id);
  out->set_time_us(absl::ToUnixMicros(event.time));
  out->set_seq(event.seq);
  out->set_kind(ToProto(event.kind));
  out->set_gpu(event.gpu);
  out->set_xid(event.xid);
  out->set_injected(event.injected);
  if (event.injection) *out->mutable_injection() = ToProto(*event.injection);
  if (event.principal) *out->mutable_principal() = ToProto(*event.principal);
  out->set_message(event.message);
  if (event.xid_rule) ToProto(*event.xid_rule, event.xid_known, out->mutable_xid_info());
  if (event.sxid) {
    v1::SxidInfo* sxid = out->mutable_sxid();
    sxid->set_nvswitch(event.sxid->nvswitch);
    sxid->set_pci_bus_id(event.sxid->pci_bus_id);
    sxid->set_code(event.sxid->sxid);
    sxid->set_fatal(event.sxid->fatal);
    sxid->set_link(event.sxid->link.has_value() ? static_cast<int32_t>(*event.sxid->link) : -1);
  }
}

v1::XidSeverity ToProto(XidRule::Severity severity) {
  switch (severity) {
    case XidRule::Severity::kIgnore:
      return v1::XID_SEVERITY_IGNORE;
    case XidRule::Severity::kWarn:
      return v1::XID_SEVERITY_WARN;
    case XidRule::Severity::kFail:
      return v1::XID_SEVERITY_FAIL;
    case XidRule::Severity::kCount:
      return v1::XID_SEVERITY_COUNT;
  }
  return v1::XID_SEVERITY_UNSPECIFIED;
}

void ToProto(const XidRule& rule, bool known, v1::XidInfo* out) {
  out->set_known(known);
  if (known) out->set_meaning(rule.meaning);
  out->set_severity(ToProto(rule.severity));
  out->set_system(std::string(HealthSystemName(rule.system)));
  out->set_code(rule.code);
  out->set_action(rule.action);
  out->set_recommended_action(ToProto(rule.recommended));
}

}  // namespace vigil
