// Implements the /metrics renderer. Built for speed (it runs once per engine tick): label text is
// precomputed per GPU and samples are appended into one buffer.
#include "exporter/render.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "api/convert.h"
#include "fields/health_systems.h"
#include "fields/xid_texts.h"
#include "fmt/format.h"

namespace vigil {
namespace {

void AppendDouble(std::string* out, double value) {
  if (std::isnan(value)) {
    out->append("NaN");
  } else if (std::isinf(value)) {
    out->append(value > 0 ? "+Inf" : "-Inf");
  } else {
    fmt::format_to(std::back_inserter(*out), "{:f}", value);
  }
}

// The value part of a sample, or "" when there is nothing to report (not supported, lost...).
std::string FormatValue(const v1::FieldValue& value) {
  if (value.status() != v1::VALUE_STATUS_OK) return "";
  std::string text;
  switch (value.value_case()) {
    case v1::FieldValue::kIntValue:
      fmt::format_to(std::back_inserter(text), "{}", value.int_value());
      break;
    case v1::FieldValue::kDoubleValue:
      AppendDouble(&text, value.double_value());
      break;
    case v1::FieldValue::kStringValue:
      text = value.string_value();
      break;
    default:
      break;
  }
  return text;
}

// Appends ,NAME="VALUE" with the value escaped for the text format.
void AppendLabel(std::string* out, std::string_view name, std::string_view value) {
  out->push_back(',');
  out->append(name);
  out->append("=\"");
  for (char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '"') {
      out->append("\\\"");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

// The label text of one GPU's samples in dcgm-exporter's order: the identity labels, then the
// "labels" (label fields, then metric-specific labels) sorted bytewise, then the "attributes"
// (container, err_code, err_msg, namespace, pod, pod_uid) sorted bytewise. Label fields are DCGM_*
// names, which sort before every (lower-case) metric-specific label, so the pieces are precomputed
// once per GPU and concatenated per sample.
struct GpuLabels {
  std::string head;               // "{gpu=...,...,Hostname=...,DCGM_FI_DRIVER_VERSION=..."
  std::string container;          // ",container=..." or ""
  std::string namespace_and_pod;  // ",namespace=...,pod=...[,pod_uid=...]" or ""
};

// One sample: NAME{labels[,extra labels][,container][,extra attributes][,namespace,pod]} VALUE
void AppendSample(std::string* out, std::string_view name, const GpuLabels& labels,
                  std::string_view extra_labels, std::string_view extra_attributes,
                  std::string_view value) {
  out->append(name);
  out->append(labels.head);
  out->append(extra_labels);
  out->append(labels.container);
  out->append(extra_attributes);
  out->append(labels.namespace_and_pod);
  out->append("} ");
  out->append(value);
  out->push_back('\n');
}

// What one set of series describes: a GPU, or one GPU instance of a GPU in MIG mode.
struct Entity {
  const v1::Gpu* gpu;
  const v1::MigInstance* instance;  // null: the whole GPU
};

std::vector<Entity> Entities(const ExporterView& view) {
  std::vector<Entity> entities;
  for (const v1::Gpu& gpu : view.gpus) {
    if (gpu.mig_mode() && gpu.mig_instances_size() > 0) {
      for (const v1::MigInstance& instance : gpu.mig_instances()) {
        entities.push_back({&gpu, &instance});
      }
    } else {
      entities.push_back({&gpu, nullptr});
    }
  }
  return entities;
}

// The container an entity is allocated to, as dcgm-exporter matches the kubelet's devices: a
// whole GPU by its UUID (or, with --kubernetes-gpu-id-type device-name, its device name
// "nvidia0"); a GPU instance by its MIG device's id whatever the id type — the MIG UUID, the old
// "MIG-GPU-<uuid>/<gi>/<ci>", or "nvidia0/gi3" as some device plugins (GKE's) name it.
const PodInfo* PodOf(const ExporterView& view, const Entity& entity, GpuIdType id_type) {
  const auto find = [&](const std::string& key) -> const PodInfo* {
    auto it = view.pods.find(key);
    return it != view.pods.end() ? &it->second : nullptr;
  };
  if (entity.instance == nullptr) {
    return find(id_type == GpuIdType::kDeviceName ? entity.gpu->device() : entity.gpu->uuid());
  }
  const v1::MigInstance& instance = *entity.instance;
  for (const std::string& id :
       MigDeviceIds(entity.gpu->uuid(), entity.gpu->device(), instance.gpu_instance_id(),
                    instance.compute_instance_id(), instance.uuid())) {
    if (const PodInfo* pod = find(id)) return pod;
  }
  return nullptr;
}

void Header(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  AppendLabel(&out, "", value);  // ,="..."
  return out.substr(3, out.size() - 4);
}

const std::vector<std::pair<int64_t, std::string>>& ClockEventNames() {
  static const auto* const names = new std::vector<std::pair<int64_t, std::string>>{
      {0x1, "gpu_idle"},    {0x2, "clocks_setting"},  {0x4, "power_cap"},
      {0x8, "hw_slowdown"}, {0x10, "sync_boost"},     {0x20, "sw_thermal"},
      {0x40, "hw_thermal"}, {0x80, "hw_power_brake"}, {0x100, "display_clocks"}};
  return *names;
}

std::string RenderMetrics(const Counters& counters, const ExporterView& view,
                          const RenderOptions& options) {
  std::string out;
  out.reserve(view.gpus.size() * counters.counters.size() * 260 + 4096);
  if (view.engine_up) {
    // The entities with series, as dcgm-exporter's default (flex) mode monitors them: a GPU, or
    // on a GPU in MIG mode that holds instances, each of its GPU instances instead.
    const std::vector<Entity> entities = Entities(view);
    const size_t gpus = entities.size(), width = counters.counters.size();
    std::unordered_map<uint32_t, std::pair<size_t, size_t>> gpu_entities;  // [first, last)
    std::map<std::pair<uint32_t, uint32_t>, size_t> instance_entity;       // (GPU, GPU instance)
    for (size_t e = 0; e < gpus; ++e) {
      const uint32_t index = entities[e].gpu->index();
      auto [range, added] = gpu_entities.try_emplace(index, e, e + 1);
      if (!added) range->second.second = e + 1;
      if (entities[e].instance != nullptr) {
        instance_entity[{index, entities[e].instance->gpu_instance_id()}] = e;
      }
    }
    std::unordered_map<FieldId, std::vector<size_t>> counter_positions;
    for (size_t c = 0; c < width; ++c) {
      if (counters.counters[c].field != nullptr) {
        counter_positions[counters.counters[c].field->id].push_back(c);
      }
    }
    // The values by (entity, counter position), in one pass over the tick: a GPU's value serves
    // each of its instances (the parent's temperature, power, ... as DCGM answers for a GPU
    // instance), an instance's own value replaces it.
    std::vector<const v1::FieldValue*> values(gpus * width, nullptr);
    for (const v1::FieldValue& value : view.tick.values()) {
      auto c = counter_positions.find(value.field_id());
      if (c == counter_positions.end()) continue;
      if (value.has_gpu_instance()) {
        auto e = instance_entity.find({value.gpu(), value.gpu_instance()});
        if (e == instance_entity.end()) continue;
        for (size_t position : c->second) values[e->second * width + position] = &value;
        continue;
      }
      auto range = gpu_entities.find(value.gpu());
      if (range == gpu_entities.end()) continue;
      for (size_t e = range->second.first; e < range->second.second; ++e) {
        for (size_t position : c->second) {
          const v1::FieldValue*& slot = values[e * width + position];
          if (slot == nullptr || !slot->has_gpu_instance()) slot = &value;
        }
      }
    }
    // Per entity: the label text, with its label fields and pod.
    std::vector<GpuLabels> labels(gpus);
    for (size_t e = 0; e < gpus; ++e) {
      const v1::Gpu& gpu = *entities[e].gpu;
      const v1::MigInstance* instance = entities[e].instance;
      std::string& head = labels[e].head;
      fmt::format_to(std::back_inserter(head), "{{gpu=\"{}\"", gpu.index());
      AppendLabel(&head, options.old_namespace ? "uuid" : "UUID", gpu.uuid());
      AppendLabel(&head, "pci_bus_id", gpu.pci_bus_id());
      AppendLabel(&head, "device", gpu.device());
      AppendLabel(&head, "modelName", gpu.name());
      if (instance != nullptr) {
        AppendLabel(&head, "GPU_I_PROFILE", instance->profile());
        AppendLabel(&head, "GPU_I_ID", std::to_string(instance->gpu_instance_id()));
      }
      if (!options.hostname.empty()) AppendLabel(&head, options.hostname_label, options.hostname);
      std::map<std::string_view, std::string> label_fields;  // sorted by name
      for (size_t c = 0; c < width; ++c) {
        const Counter& counter = counters.counters[c];
        const v1::FieldValue* value = values[e * width + c];
        if (!counter.is_label() || value == nullptr) continue;
        std::string text = FormatValue(*value);
        if (!text.empty()) label_fields[counter.name] = std::move(text);
      }
      for (const auto& [name, text] : label_fields) AppendLabel(&head, name, text);
      if (const PodInfo* pod = PodOf(view, entities[e], options.gpu_id_type)) {
        // Sorted by name either way: container < err_* < namespace < pod, and container_name <
        // err_* < pod_name < pod_namespace with dcgm-exporter 1.x's names.
        AppendLabel(&labels[e].container, options.old_namespace ? "container_name" : "container",
                    pod->container);
        // Held through a ResourceClaim: dcgm-exporter 4.8.3's DRA labels (sorted by name, between
        // container and err_*), the MIG pair on a MIG instance's series.
        if (pod->dra.has_value()) {
          std::string& dra = labels[e].container;
          AppendLabel(&dra, "dra_claim_name", pod->dra->claim_name);
          AppendLabel(&dra, "dra_claim_namespace", pod->dra->claim_namespace);
          AppendLabel(&dra, "dra_device_name", pod->dra->device);
          AppendLabel(&dra, "dra_driver_name", pod->dra->driver);
          if (const v1::MigInstance* instance = entities[e].instance) {
            AppendLabel(&dra, "dra_mig_device_uuid", instance->uuid());
            AppendLabel(&dra, "dra_mig_profile", instance->profile());
          }
          AppendLabel(&dra, "dra_pool_name", pod->dra->pool);
        }
        if (options.old_namespace) {
          AppendLabel(&labels[e].namespace_and_pod, "pod_name", pod->pod);
          AppendLabel(&labels[e].namespace_and_pod, "pod_namespace", pod->namespace_name);
        } else {
          AppendLabel(&labels[e].namespace_and_pod, "namespace", pod->namespace_name);
          AppendLabel(&labels[e].namespace_and_pod, "pod", pod->pod);
        }
        if (options.pod_uid) AppendLabel(&labels[e].namespace_and_pod, "pod_uid", pod->uid);
      }
    }

    std::string rows, extra, attributes;
    for (size_t c = 0; c < width; ++c) {
      const Counter& counter = counters.counters[c];
      if (counter.is_label()) continue;
      rows.clear();
      if (counter.field != nullptr) {
        const bool xid_field = counter.field->id == fid::kXidErrors;
        for (size_t g = 0; g < gpus; ++g) {
          const v1::FieldValue* value = values[g * width + c];
          if (value == nullptr) continue;
          const std::string text = FormatValue(*value);
          if (text.empty()) continue;  // unsupported or unreadable: omitted, never zero
          attributes.clear();
          if (xid_field) {
            const int64_t xid = value->int_value();
            AppendLabel(&attributes, "err_code", text);
            AppendLabel(&attributes, "err_msg", DcgmExporterXidText(xid));
          }
          AppendSample(&rows, counter.name, labels[g], "", attributes, text);
        }
      } else if (*counter.exporter == ExporterMetric::kXidErrorsCount) {
        std::string window;
        AppendLabel(&window, "window_size_in_ms", std::to_string(options.xid_window_ms));
        for (size_t g = 0; g < gpus; ++g) {
          auto counts = view.xid_counts.find(entities[g].gpu->index());
          if (counts == view.xid_counts.end() || counts->second.empty()) {
            AppendSample(&rows, counter.name, labels[g], window, "", "0");
            continue;
          }
          for (const auto& [xid, count] : counts->second) {
            extra = window;
            AppendLabel(&extra, "xid", std::to_string(xid));
            AppendSample(&rows, counter.name, labels[g], extra, "", std::to_string(count));
          }
        }
      } else if (*counter.exporter == ExporterMetric::kClockEventsCount) {
        std::string window;
        AppendLabel(&window, "window_size_in_ms", std::to_string(options.clock_events_window_ms));
        for (size_t g = 0; g < gpus; ++g) {
          auto counts = view.clock_event_counts.find(entities[g].gpu->index());
          if (counts == view.clock_event_counts.end()) continue;
          for (const auto& [bit, name] : ClockEventNames()) {
            auto count = counts->second.find(name);
            if (count == counts->second.end()) continue;
            extra.clear();
            AppendLabel(&extra, "clock_event", name);
            extra += window;
            AppendSample(&rows, counter.name, labels[g], extra, "", std::to_string(count->second));
          }
        }
      } else if (*counter.exporter == ExporterMetric::kGpuHealthStatus) {
        for (size_t g = 0; g < gpus; ++g) {
          for (const v1::GpuHealth& gpu : view.tick.health().gpus()) {
            if (gpu.gpu() != entities[g].gpu->index()) continue;
            auto row = [&](std::string_view watch, v1::HealthStatus status, std::string_view code) {
              if (HealthStatusNumber(status) < 0) return;  // UNKNOWN has no DCGM value: left out
              extra.clear();
              AppendLabel(&extra, "health_error_code", code);
              AppendLabel(&extra, "health_watch", watch);
              AppendSample(&rows, counter.name, labels[g], extra, "",
                           std::to_string(HealthStatusNumber(status)));
            };
            // The worst incident's code per system, DCGM_FR_OK when there is none.
            std::string overall_code = "DCGM_FR_OK";
            for (const v1::SystemHealth& system : gpu.systems()) {
              std::string code = "DCGM_FR_OK";
              v1::HealthStatus worst = v1::HEALTH_STATUS_PASS;
              for (const v1::HealthIncident& incident : system.incidents()) {
                if (HealthStatusNumber(incident.status()) >= HealthStatusNumber(worst)) {
                  worst = incident.status();
                  code = incident.code();
                }
              }
              if (system.status() == gpu.status() && code != "DCGM_FR_OK") overall_code = code;
              row(HealthSystemWatchName(system.system()), system.status(), code);
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
    // The engine's own counters, so a hung or lost GPU read shows as a rate an alert can use.
    const v1::EngineCounters& counters = view.tick.counters();
    Header(&out, "vigil_engine_gpu_read_failures_total", "counter",
           "Reads of a whole GPU that failed in the engine (lost, hung, ...).");
    out += fmt::format("vigil_engine_gpu_read_failures_total {}\n", counters.gpu_read_failures());
    Header(&out, "vigil_engine_gpu_read_timeouts_total", "counter",
           "GPU reads in the engine that the driver did not answer in time.");
    out += fmt::format("vigil_engine_gpu_read_timeouts_total {}\n", counters.gpu_read_timeouts());
    Header(&out, "vigil_engine_xid_events_total", "counter",
           "XIDs the engine received (injected ones included).");
    out += fmt::format("vigil_engine_xid_events_total {}\n", counters.xid_events());
    Header(&out, "vigil_engine_xid_duplicates_total", "counter",
           "Real XIDs that both NVML's events and the kernel log reported, counted once.");
    out += fmt::format("vigil_engine_xid_duplicates_total {}\n", counters.xid_duplicates());
    if (counters.kernel_log() != v1::KERNEL_LOG_OFF) {
      Header(&out, "vigil_engine_kernel_log_up", "gauge",
             "Whether the engine reads the kernel log for the driver's XIDs (1) or cannot (0: "
             "absent or unreadable, e.g. no CAP_SYSLOG).");
      out += fmt::format("vigil_engine_kernel_log_up {}\n",
                         counters.kernel_log() == v1::KERNEL_LOG_READING ? 1 : 0);
      Header(&out, "vigil_engine_kernel_log_xids_total", "counter",
             "XIDs the engine took from the kernel log.");
      out += fmt::format("vigil_engine_kernel_log_xids_total {}\n", counters.kernel_log_xids());
      Header(&out, "vigil_engine_kernel_log_unknown_gpu_total", "counter",
             "Kernel log XIDs for a PCI bus id that is none of the engine's GPUs.");
      out += fmt::format("vigil_engine_kernel_log_unknown_gpu_total {}\n",
                         counters.kernel_log_unknown_gpu());
    }
    Header(&out, "vigil_engine_persistence_pending_records", "gauge",
           "Health state records (FAIL incidents) not yet durable in the engine's state dir.");
    out += fmt::format("vigil_engine_persistence_pending_records {}\n",
                       counters.persistence_pending());
    Header(&out, "vigil_engine_persistence_lag_seconds", "gauge",
           "How long the oldest health state record not yet durable has waited.");
    out += fmt::format("vigil_engine_persistence_lag_seconds {:.3f}\n",
                       counters.persistence_lag_us() / 1e6);
    Header(&out, "vigil_engine_persistence_failures_total", "counter",
           "Failed attempts to persist health state (a full or failing disk).");
    out += fmt::format("vigil_engine_persistence_failures_total {}\n",
                       counters.persistence_failures());
    if (!view.sxid_counts.empty()) {
      Header(&out, "vigil_nvswitch_sxid_events_total", "counter",
             "NVSwitch errors (SXids) the engine took from the kernel log, by switch and code.");
      for (const auto& [key, count] : view.sxid_counts) {
        out += fmt::format(
            "vigil_nvswitch_sxid_events_total{{nvswitch=\"{}\",pci_bus_id=\"{}\",sxid=\"{}\","
            "severity=\"{}\"}} {}\n",
            key.nvswitch, EscapeLabelValue(key.pci_bus_id), key.code,
            key.fatal ? "fatal" : "non-fatal", count);
      }
    }
    Header(&out, "vigil_gpu_health_status", "gauge",
           "The engine's health verdict per GPU and system: 0 pass, 10 warn, 20 fail, -1 unknown "
           "(no fresh data); injected=\"true\" while an injected fault (a drill) drives it.");
    for (const v1::GpuHealth& gpu : view.tick.health().gpus()) {
      for (const v1::SystemHealth& system : gpu.systems()) {
        // A status that only injected incidents drive (a drill) says so, so that alerts on it
        // carry injected="true" and an operator's routing can send them to a test receiver. A
        // real incident at that status takes the label away: a drill never hides a real fault.
        bool injected = false;
        for (const v1::HealthIncident& incident : system.incidents()) {
          if (incident.status() != system.status()) continue;
          if (!incident.injected()) {
            injected = false;
            break;
          }
          injected = true;
        }
        out +=
            fmt::format("vigil_gpu_health_status{{gpu=\"{}\",UUID=\"{}\",system=\"{}\"{}}} {}\n",
                        gpu.gpu(), EscapeLabelValue(gpu.uuid()), system.system(),
                        injected ? ",injected=\"true\"" : "", HealthStatusNumber(system.status()));
      }
    }
    if (view.tick.health().node_systems_size() > 0) {
      Header(&out, "vigil_node_health_status", "gauge",
             "The engine's health verdict per node-level system (nvswitch: the NVSwitches' SXids): "
             "0 pass, 10 warn, 20 fail, -1 unknown (the kernel log cannot be read).");
      for (const v1::SystemHealth& system : view.tick.health().node_systems()) {
        out += fmt::format("vigil_node_health_status{{system=\"{}\"}} {}\n", system.system(),
                           HealthStatusNumber(system.status()));
      }
    }
  }
  return out;
}

}  // namespace vigil
