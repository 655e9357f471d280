// Implements the /metrics renderer.
#include "exporter/render.h"

#include <algorithm>
#include <cmath>

#include "fmt/format.h"

namespace vigil {
namespace {

std::string FormatDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{:f}", value);
}

// The value part of a sample, or "" when there is nothing to report (not supported, lost...).
std::string FormatValue(const v1::FieldValue& value) {
  if (value.status() != v1::VALUE_STATUS_OK) return "";
  switch (value.value_case()) {
    case v1::FieldValue::kIntValue:
      return std::to_string(value.int_value());
    case v1::FieldValue::kDoubleValue:
      return FormatDouble(value.double_value());
    case v1::FieldValue::kStringValue:
      return value.string_value();
    default:
      return "";
  }
}

// Builds the label sets of one GPU's samples in dcgm-exporter's order: the identity labels, then
// the "labels" (label fields and metric-specific labels) sorted bytewise, then the "attributes"
// (pod, namespace, container, err_code, err_msg) sorted bytewise.
class GpuLabels {
 public:
  GpuLabels(const v1::Gpu& gpu, const RenderOptions& options,
            const std::map<std::string, std::string>& label_fields, const PodInfo* pod) {
    prefix_ =
        fmt::format("gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"{}\",modelName=\"{}\"",
                    gpu.index(), EscapeLabelValue(gpu.uuid()), EscapeLabelValue(gpu.pci_bus_id()),
                    EscapeLabelValue(gpu.device()), EscapeLabelValue(gpu.name()));
    if (!options.hostname.empty()) {
      prefix_ +=
          fmt::format(",{}=\"{}\"", options.hostname_label, EscapeLabelValue(options.hostname));
    }
    labels_ = label_fields;
    if (pod != nullptr) {
      attributes_ = {
          {"container", pod->container}, {"namespace", pod->namespace_name}, {"pod", pod->pod}};
    }
  }

  // "{...}" with `extra_labels` merged into the sorted labels and `extra_attributes` into the
  // attributes.
  std::string Render(const std::map<std::string, std::string>& extra_labels = {},
                     const std::map<std::string, std::string>& extra_attributes = {}) const {
    std::string out = "{" + prefix_;
    auto append = [&](const std::map<std::string, std::string>& base,
                      const std::map<std::string, std::string>& extra) {
      std::map<std::string, std::string> merged = base;
      for (const auto& [key, value] : extra) merged[key] = value;
      for (const auto& [key, value] : merged) {
        out += fmt::format(",{}=\"{}\"", key, EscapeLabelValue(value));
      }
    };
    append(labels_, extra_labels);
    append(attributes_, extra_attributes);
    out += "}";
    return out;
  }

 private:
  std::string prefix_;
  std::map<std::string, std::string> labels_;
  std::map<std::string, std::string> attributes_;
};

// The DCGM health watch names dcgm-exporter reports, for Vigil's systems.
std::string_view WatchName(std::string_view system) {
  if (system == "pcie") return "PCIE";
  if (system == "memory") return "MEM";
  if (system == "inforom") return "INFOROM";
  if (system == "thermal") return "THERMAL";
  if (system == "power") return "POWER";
  if (system == "nvlink") return "NVLINK";
  if (system == "driver") return "DRIVER";
  return "UNKNOWN";
}

int HealthValue(v1::HealthStatus status) {
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

void Header(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

const std::vector<std::pair<int64_t, std::string>>& ClockEventNames() {
  static const auto* const names = new std::vector<std::pair<int64_t, std::string>>{
      {0x1, "gpu_idle"},    {0x2, "clocks_setting"},  {0x4, "power_cap"},
      {0x8, "hw_slowdown"}, {0x10, "sync_boost"},     {0x20, "sw_thermal"},
      {0x40, "hw_thermal"}, {0x80, "hw_power_brake"}, {0x100, "display_clocks"}};
  return *names;
}

std::string RenderMetrics(const Counters& counters, const ExporterView& view,
                          const RenderOptions& options, const HealthPolicy& policy) {
  std::string out;
  out.reserve(16 * 1024);
  if (view.engine_up) {
    // Values by (gpu, field).
    std::map<std::pair<uint32_t, uint32_t>, const v1::FieldValue*> values;
    for (const v1::FieldValue& value : view.tick.values()) {
      values[{value.gpu(), value.field_id()}] = &value;
    }
    // Per GPU: its label rows (label-type counters with a value), and its label builder.
    std::vector<GpuLabels> labels;
    for (const v1::Gpu& gpu : view.gpus) {
      std::map<std::string, std::string> label_fields;
      for (const Counter& counter : counters.counters) {
        if (!counter.is_label()) continue;
        auto it = values.find({gpu.index(), counter.field->id});
        if (it == values.end()) continue;
        const std::string text = FormatValue(*it->second);
        if (!text.empty()) label_fields[counter.name] = text;
      }
      auto pod = view.pods.find(gpu.uuid());
      labels.emplace_back(gpu, options, label_fields,
                          pod != view.pods.end() ? &pod->second : nullptr);
    }

    for (const Counter& counter : counters.counters) {
      if (counter.is_label()) continue;
      std::string rows;
      if (counter.field != nullptr) {
        for (size_t g = 0; g < view.gpus.size(); ++g) {
          auto it = values.find({view.gpus[g].index(), counter.field->id});
          if (it == values.end()) continue;
          const std::string text = FormatValue(*it->second);
          if (text.empty()) continue;  // unsupported or unreadable: omitted, never zero
          std::map<std::string, std::string> attributes;
          if (counter.field->id == fid::kXidErrors) {
            const int64_t xid = it->second->int_value();
            attributes["err_code"] = std::to_string(xid);
            attributes["err_msg"] = xid == 0 ? "No Error"
                                    : policy.xids.contains(static_cast<uint32_t>(xid))
                                        ? policy.RuleFor(static_cast<uint32_t>(xid)).meaning
                                        : "Unknown Error";
          }
          rows += fmt::format("{}{} {}\n", counter.name, labels[g].Render({}, attributes), text);
        }
      } else if (*counter.exporter == ExporterMetric::kXidErrorsCount) {
        const std::string window = std::to_string(options.xid_window_ms);
        for (size_t g = 0; g < view.gpus.size(); ++g) {
          auto counts = view.xid_counts.find(view.gpus[g].index());
          if (counts == view.xid_counts.end() || counts->second.empty()) {
            rows += fmt::format("{}{} 0\n", counter.name,
                                labels[g].Render({{"window_size_in_ms", window}}));
            continue;
          }
          for (const auto& [xid, count] : counts->second) {
            rows += fmt::format(
                "{}{} {}\n", counter.name,
                labels[g].Render({{"window_size_in_ms", window}, {"xid", std::to_string(xid)}}),
                count);
          }
        }
      } else if (*counter.exporter == ExporterMetric::kClockEventsCount) {
        const std::string window = std::to_string(options.clock_events_window_ms);
        for (size_t g = 0; g < view.gpus.size(); ++g) {
          auto counts = view.clock_event_counts.find(view.gpus[g].index());
          if (counts == view.clock_event_counts.end()) continue;
          for (const auto& [bit, name] : ClockEventNames()) {
            auto count = counts->second.find(name);
            if (count == counts->second.end()) continue;
            rows += fmt::format(
                "{}{} {}\n", counter.name,
                labels[g].Render({{"clock_event", name}, {"window_size_in_ms", window}}),
                count->second);
          }
        }
      } else if (*counter.exporter == ExporterMetric::kGpuHealthStatus) {
        for (size_t g = 0; g < view.gpus.size(); ++g) {
          for (const v1::GpuHealth& gpu : view.tick.health().gpus()) {
            if (gpu.gpu() != view.gpus[g].index()) continue;
            auto row = [&](std::string_view watch, v1::HealthStatus status, std::string_view code) {
              if (HealthValue(status) < 0) return;  // UNKNOWN has no DCGM value: left out
              rows += fmt::format("{}{} {}\n", counter.name,
                                  labels[g].Render({{"health_error_code", std::string(code)},
                                                    {"health_watch", std::string(watch)}}),
                                  HealthValue(status));
            };
            // The worst incident's code per system, DCGM_FR_OK when there is none.
            std::string overall_code = "DCGM_FR_OK";
            for (const v1::SystemHealth& system : gpu.systems()) {
              std::string code = "DCGM_FR_OK";
              v1::HealthStatus worst = v1::HEALTH_STATUS_PASS;
              for (const v1::HealthIncident& incident : system.incidents()) {
                if (HealthValue(incident.status()) >= HealthValue(worst)) {
                  worst = incident.status();
                  code = incident.code();
                }
              }
              if (system.status() == gpu.status() && code != "DCGM_FR_OK") overall_code = code;
              row(WatchName(system.system()), system.status(), code);
            }
            row("ALL", gpu.status(), overall_code);
          }
        }
      }
      if (rows.empty() && counter.exporter != ExporterMetric::kGpuHealthStatus) continue;
      Header(&out, counter.name, counter.type, counter.help);
      out += rows;
    }
  }

  // Vigil's own metrics: always present, so "the engine is down" is visible.
  Header(&out, "vigil_engine_up", "gauge",
         "Whether the exporter holds fresh data from its engine (1) or not (0).");
  out += fmt::format("vigil_engine_up {}\n", view.engine_up ? 1 : 0);
  if (view.engine_up) {
    Header(&out, "vigil_engine_info", "gauge", "The engine this exporter reads from.");
    out += fmt::format(
        "vigil_engine_info{{node=\"{}\",instance_id=\"{}\",version=\"{}\",backend=\"{}\"}} 1\n",
        EscapeLabelValue(view.info.node_name()), EscapeLabelValue(view.tick.instance_id()),
        EscapeLabelValue(view.info.version()), EscapeLabelValue(view.info.backend()));
    Header(&out, "vigil_engine_seq", "gauge",
           "The engine tick these values come from (with instance_id, identifies the state).");
    out += fmt::format("vigil_engine_seq {}\n", view.tick.seq());
    Header(&out, "vigil_gpu_health_status", "gauge",
           "The engine's health verdict per GPU and system: 0 pass, 10 warn, 20 fail, -1 unknown "
           "(no fresh data).");
    for (const v1::GpuHealth& gpu : view.tick.health().gpus()) {
      for (const v1::SystemHealth& system : gpu.systems()) {
        out += fmt::format("vigil_gpu_health_status{{gpu=\"{}\",UUID=\"{}\",system=\"{}\"}} {}\n",
                           gpu.gpu(), EscapeLabelValue(gpu.uuid()), system.system(),
                           HealthValue(system.status()));
      }
    }
  }
  return out;
}

}  // namespace vigil
