// Implements the value conversions and the proto-only helpers.
#include "api/convert.h"

namespace vigil {

v1::ValueStatus ToProto(ValueStatus status) {
  switch (status) {
    case ValueStatus::kOk:
      return v1::VALUE_STATUS_OK;
    case ValueStatus::kNotSupported:
      return v1::VALUE_STATUS_NOT_SUPPORTED;
    case ValueStatus::kGpuLost:
      return v1::VALUE_STATUS_GPU_LOST;
    case ValueStatus::kReadError:
      return v1::VALUE_STATUS_READ_ERROR;
    case ValueStatus::kNoPermission:
      return v1::VALUE_STATUS_NO_PERMISSION;
    case ValueStatus::kTimeout:
      return v1::VALUE_STATUS_TIMEOUT;
    case ValueStatus::kNoData:
      return v1::VALUE_STATUS_NO_DATA;
    case ValueStatus::kResetRequired:
      return v1::VALUE_STATUS_RESET_REQUIRED;
  }
  return v1::VALUE_STATUS_UNSPECIFIED;
}

ValueStatus FromProto(v1::ValueStatus status) {
  for (ValueStatus candidate :
       {ValueStatus::kOk, ValueStatus::kNotSupported, ValueStatus::kGpuLost,
        ValueStatus::kReadError, ValueStatus::kNoPermission, ValueStatus::kTimeout,
        ValueStatus::kNoData, ValueStatus::kResetRequired}) {
    if (ToProto(candidate) == status) return candidate;
  }
  return ValueStatus::kReadError;
}

v1::FieldType ToProto(FieldType type) {
  switch (type) {
    case FieldType::kInt64:
      return v1::FIELD_TYPE_INT64;
    case FieldType::kDouble:
      return v1::FIELD_TYPE_DOUBLE;
    case FieldType::kString:
      return v1::FIELD_TYPE_STRING;
  }
  return v1::FIELD_TYPE_UNSPECIFIED;
}

namespace {

// Fills the value part shared by FieldValue and Sample messages.
template <typename Message>
void SetValueOf(const FieldValue& value, Message* out) {
  out->set_status(ToProto(value.status));
  out->set_injected(value.injected);
  if (!value.ok()) return;
  if (const auto* i = std::get_if<int64_t>(&value.value)) {
    out->set_int_value(*i);
  } else if (const auto* d = std::get_if<double>(&value.value)) {
    out->set_double_value(*d);
  } else {
    out->set_string_value(std::get<std::string>(value.value));
  }
}

}  // namespace

void SetValue(const FieldValue& value, v1::FieldValue* out) { SetValueOf(value, out); }
void SetValue(const FieldValue& value, v1::Sample* out) { SetValueOf(value, out); }

std::string_view HealthStatusText(v1::HealthStatus status) {
  switch (status) {
    case v1::HEALTH_STATUS_PASS:
      return "PASS";
    case v1::HEALTH_STATUS_WARN:
      return "WARN";
    case v1::HEALTH_STATUS_FAIL:
      return "FAIL";
    default:
      return "UNKNOWN";
  }
}

int HealthStatusNumber(v1::HealthStatus status) {
  switch (status) {
    case v1::HEALTH_STATUS_PASS:
      return 0;
    case v1::HEALTH_STATUS_WARN:
      return 10;
    case v1::HEALTH_STATUS_FAIL:
      return 20;
    default:
      return -1;
  }
}

std::string_view RecommendedActionText(v1::RecommendedAction action) {
  switch (action) {
    case v1::RECOMMENDED_ACTION_NONE:
      return "none";
    case v1::RECOMMENDED_ACTION_RESTART_APP:
      return "restart-app";
    case v1::RECOMMENDED_ACTION_RESET_GPU:
      return "reset-gpu";
    case v1::RECOMMENDED_ACTION_REBOOT:
      return "reboot";
    case v1::RECOMMENDED_ACTION_INSPECT:
      return "inspect";
    default:
      return "";
  }
}

std::string_view InjectionModeText(v1::InjectionMode mode) {
  switch (mode) {
    case v1::INJECTION_MODE_VALUE:
      return "value";
    case v1::INJECTION_MODE_ADD:
      return "add";
    case v1::INJECTION_MODE_XID:
      return "xid";
    default:
      return "unknown";
  }
}

std::string_view ScenarioStateText(v1::Scenario::State state) {
  switch (state) {
    case v1::Scenario::RUNNING:
      return "running";
    case v1::Scenario::DONE:
      return "done";
    case v1::Scenario::CANCELLED:
      return "cancelled";
    case v1::Scenario::FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

std::string_view KernelLogStateText(v1::KernelLogState state) {
  switch (state) {
    case v1::KERNEL_LOG_OFF:
      return "off";
    case v1::KERNEL_LOG_READING:
      return "reading";
    case v1::KERNEL_LOG_ABSENT:
      return "absent";
    case v1::KERNEL_LOG_UNREADABLE:
      return "unreadable";
    default:
      return "unknown";
  }
}

std::string_view XidSeverityText(v1::XidSeverity severity) {
  switch (severity) {
    case v1::XID_SEVERITY_IGNORE:
      return "ignore";
    case v1::XID_SEVERITY_WARN:
      return "warn";
    case v1::XID_SEVERITY_FAIL:
      return "fail";
    case v1::XID_SEVERITY_COUNT:
      return "count";
    default:
      return "unknown";
  }
}

void ToProto(uint32_t gpu, const GpuProcessList& list, v1::GpuProcesses* out) {
  out->set_gpu(gpu);
  out->set_known(list.known);
  for (const GpuProcess& process : list.processes) {
    v1::GpuProcess* entry = out->add_processes();
    entry->set_pid(process.pid);
    entry->set_gpu_instance(process.gpu_instance);
    entry->set_used_memory_bytes(
        process.used_memory_bytes ? static_cast<int64_t>(*process.used_memory_bytes) : -1);
    entry->set_sm_util(process.sm_util ? static_cast<int32_t>(*process.sm_util) : -1);
  }
}

void ToProto(const NicPortEntity& port, v1::NicPort* out) {
  out->set_name(port.name);
  out->set_pci_bus_id(port.pci_bus_id);
  out->set_link_layer(port.link_layer);
  out->set_netdev(port.netdev);
  for (uint32_t gpu : port.gpus) out->add_gpus(gpu);
  out->set_attachment(port.attachment);
  out->set_state(port.state);
  out->set_phys_state(port.phys_state);
  out->set_state_id(port.state_id);
  out->set_phys_state_id(port.phys_state_id);
  out->set_rate_gbps(port.rate_gbps);
  out->set_lanes(port.lanes);
  out->set_speed(port.speed);
  for (const auto& [name, value] : port.counters) (*out->mutable_counters())[name] = value;
  for (const std::string& field : port.injected) out->add_injected(field);
}

}  // namespace vigil
