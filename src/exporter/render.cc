// Implements the /metrics renderer. Built for speed (it runs once per engine tick): label text is
// precomputed per GPU and samples are appended into one buffer.
#include "exporter/render.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <unordered_map>

#include "api/convert.h"
#include "common/prometheus_text.h"
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

// The containers an entity is allocated to, as dcgm-exporter matches the kubelet's devices: a
// whole GPU by its UUID (or, with --kubernetes-gpu-id-type device-name, its device name
// "nvidia0"); a GPU instance by its MIG device's id whatever the id type — the MIG UUID, the old
// "MIG-GPU-<uuid>/<gi>/<ci>", or "nvidia0/gi3" as some device plugins (GKE's) name it. Null:
// none.
const std::vector<PodInfo>* PodsOf(const ExporterView& view, const Entity& entity,
                                   GpuIdType id_type) {
  const auto find = [&](const std::string& key) -> const std::vector<PodInfo>* {
    auto it = view.pods.find(key);
    return it != view.pods.end() && !it->second.empty() ? &it->second : nullptr;
  };
  if (entity.instance == nullptr) {
    return find(id_type == GpuIdType::kDeviceName ? entity.gpu->device() : entity.gpu->uuid());
  }
  const v1::MigInstance& instance = *entity.instance;
  for (const std::string& id :
       MigDeviceIds(entity.gpu->uuid(), entity.gpu->device(), instance.gpu_instance_id(),
                    instance.compute_instance_id(), instance.uuid())) {
    if (const std::vector<PodInfo>* pods = find(id)) return pods;
  }
  return nullptr;
}

}  // namespace

const std::vector<std::pair<int64_t, std::string>>& ClockEventNames() {
  static const auto* const names = new std::vector<std::pair<int64_t, std::string>>{
      {0x1, "gpu_idle"},    {0x2, "clocks_setting"},  {0x4, "power_cap"},
      {0x8, "hw_slowdown"}, {0x10, "sync_boost"},     {0x20, "sw_thermal"},
      {0x40, "hw_thermal"}, {0x80, "hw_power_brake"}, {0x100, "display_clocks"}};
  return *names;
}

namespace {

// The tick's values by entity and counter, in one pass over the tick: a GPU's value serves each
// of its instances (the parent's temperature, power, ... as DCGM answers for a GPU instance), an
// instance's own value replaces it.
struct ValueTable {
  std::vector<Entity> entities;
  size_t width = 0;                           // counters per entity
  std::vector<const v1::FieldValue*> values;  // [entity * width + counter]; null: none
  const v1::FieldValue* at(size_t entity, size_t counter) const {
    return values[entity * width + counter];
  }
};

ValueTable TableOf(const Counters& counters, const ExporterView& view) {
  // The entities with series, as dcgm-exporter's default (flex) mode monitors them: a GPU, or
  // on a GPU in MIG mode that holds instances, each of its GPU instances instead.
  ValueTable table{.entities = Entities(view), .width = counters.counters.size()};
  const size_t width = table.width;
  std::unordered_map<uint32_t, std::pair<size_t, size_t>> gpu_entities;  // [first, last)
  std::map<std::pair<uint32_t, uint32_t>, size_t> instance_entity;       // (GPU, GPU instance)
  for (size_t e = 0; e < table.entities.size(); ++e) {
    const Entity& entity = table.entities[e];
    const uint32_t index = entity.gpu->index();
    auto [range, added] = gpu_entities.try_emplace(index, e, e + 1);
    if (!added) range->second.second = e + 1;
    if (entity.instance != nullptr) {
      instance_entity[{index, entity.instance->gpu_instance_id()}] = e;
    }
  }
  std::unordered_map<FieldId, std::vector<size_t>> counter_positions;
  for (size_t c = 0; c < width; ++c) {
    if (counters.counters[c].field != nullptr) {
      counter_positions[counters.counters[c].field->id].push_back(c);
    }
  }
  table.values.assign(table.entities.size() * width, nullptr);
  for (const v1::FieldValue& value : view.tick.values()) {
    auto c = counter_positions.find(value.field_id());
    if (c == counter_positions.end()) continue;
    if (value.has_gpu_instance()) {
      auto e = instance_entity.find({value.gpu(), value.gpu_instance()});
      if (e == instance_entity.end()) continue;
      for (size_t position : c->second) table.values[e->second * width + position] = &value;
      continue;
    }
    auto range = gpu_entities.find(value.gpu());
    if (range == gpu_entities.end()) continue;
    for (size_t e = range->second.first; e < range->second.second; ++e) {
      for (size_t position : c->second) {
        const v1::FieldValue*& slot = table.values[e * width + position];
        if (slot == nullptr || !slot->has_gpu_instance()) slot = &value;
      }
    }
  }
  return table;
}

// The pod's labels of an entity held by a container: the container (and a ResourceClaim's DRA
// labels) before err_*, the namespace and pod after; pod_uid with --kubernetes-enable-pod-uid or
// `with_uid`, then vgpu (a shared GPU's replica, with --kubernetes-virtual-gpus).
GpuLabels WithPod(GpuLabels labels, const PodInfo& pod, const Entity& entity,
                  const RenderOptions& options, bool with_uid) {
  // Sorted by name either way: container < err_* < namespace < pod, and container_name <
  // err_* < pod_name < pod_namespace with dcgm-exporter 1.x's names.
  AppendLabel(&labels.container, options.old_namespace ? "container_name" : "container",
              pod.container);
  // Held through a ResourceClaim: dcgm-exporter 4.8.3's DRA labels (sorted by name, between
  // container and err_*), the MIG pair on a MIG instance's series.
  if (pod.dra.has_value()) {
    std::string& dra = labels.container;
    AppendLabel(&dra, "dra_claim_name", pod.dra->claim_name);
    AppendLabel(&dra, "dra_claim_namespace", pod.dra->claim_namespace);
    AppendLabel(&dra, "dra_device_name", pod.dra->device);
    AppendLabel(&dra, "dra_driver_name", pod.dra->driver);
    if (const v1::MigInstance* instance = entity.instance) {
      AppendLabel(&dra, "dra_mig_device_uuid", instance->uuid());
      AppendLabel(&dra, "dra_mig_profile", instance->profile());
    }
    AppendLabel(&dra, "dra_pool_name", pod.dra->pool);
  }
  if (options.old_namespace) {
    AppendLabel(&labels.namespace_and_pod, "pod_name", pod.pod);
    AppendLabel(&labels.namespace_and_pod, "pod_namespace", pod.namespace_name);
  } else {
    AppendLabel(&labels.namespace_and_pod, "namespace", pod.namespace_name);
    AppendLabel(&labels.namespace_and_pod, "pod", pod.pod);
  }
  if (options.pod_uid || with_uid) AppendLabel(&labels.namespace_and_pod, "pod_uid", pod.uid);
  if (options.virtual_gpus && !pod.vgpu.empty()) {
    AppendLabel(&labels.namespace_and_pod, "vgpu", pod.vgpu);
  }
  return labels;
}

// The label text of entity `e` without a pod: its identity, its label fields.
GpuLabels IdentityOf(const ValueTable& table, size_t e, const Counters& counters,
                     const RenderOptions& options) {
  const Entity& entity = table.entities[e];
  const v1::Gpu& gpu = *entity.gpu;
  GpuLabels labels;
  std::string& head = labels.head;
  fmt::format_to(std::back_inserter(head), "{{gpu=\"{}\"", gpu.index());
  AppendLabel(&head, options.old_namespace ? "uuid" : "UUID", gpu.uuid());
  AppendLabel(&head, "pci_bus_id", gpu.pci_bus_id());
  AppendLabel(&head, "device", gpu.device());
  AppendLabel(&head, "modelName", gpu.name());
  if (entity.instance != nullptr) {
    AppendLabel(&head, "GPU_I_PROFILE", entity.instance->profile());
    AppendLabel(&head, "GPU_I_ID", std::to_string(entity.instance->gpu_instance_id()));
  }
  if (!options.hostname.empty()) AppendLabel(&head, options.hostname_label, options.hostname);
  std::map<std::string_view, std::string> label_fields;  // sorted by name
  for (size_t c = 0; c < table.width; ++c) {
    const Counter& counter = counters.counters[c];
    const v1::FieldValue* value = table.at(e, c);
    if (!counter.is_label() || value == nullptr) continue;
    std::string text = FormatValue(*value);
    if (!text.empty()) label_fields[counter.name] = std::move(text);
  }
  for (const auto& [name, text] : label_fields) AppendLabel(&head, name, text);
  return labels;
}

// The label sets of one entity's rows, and (--kubernetes-virtual-gpus) its pods' usage.
struct EntityRows {
  GpuLabels identity;  // no pod: the device's own series
  // Each row of a series is written once per label set: the identity with the container the
  // entity is allocated to (the last the kubelet lists), or with --kubernetes-virtual-gpus with
  // each container (its identity alone when it has none).
  std::vector<GpuLabels> rows;
  // --kubernetes-virtual-gpus, held by containers: the label sets of the per-pod rows of
  // DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_GPU_UTIL (pod_uid always, as dcgm-exporter's), their
  // pods' UIDs, and each pod's usage (nullopt: not known, so only the device's own row).
  std::vector<GpuLabels> usage_rows;
  std::vector<std::string> usage_uids;
  std::optional<std::map<std::string, PodUsage>> usage;
};

// The engine's process list of GPU `gpu` in the tick; an unread one when the tick has none.
const v1::GpuProcesses& ProcessesOf(const ExporterView& view, uint32_t gpu) {
  for (const v1::GpuProcesses& list : view.tick.processes()) {
    if (list.gpu() == gpu) return list;
  }
  return v1::GpuProcesses::default_instance();  // known=false
}

EntityRows RowsOf(const ValueTable& table, size_t e, const Counters& counters,
                  const ExporterView& view, const RenderOptions& options) {
  const Entity& entity = table.entities[e];
  EntityRows rows{.identity = IdentityOf(table, e, counters, options)};
  const std::vector<PodInfo>* pods = PodsOf(view, entity, options.gpu_id_type);
  if (pods == nullptr) {
    rows.rows.push_back(rows.identity);
    return rows;
  }
  if (!options.virtual_gpus) {
    rows.rows.push_back(WithPod(rows.identity, pods->back(), entity, options, false));
    return rows;
  }
  // Each container once: a container listing the device twice would make duplicate series.
  std::set<std::tuple<std::string_view, std::string_view, std::string_view, std::string_view>> seen;
  for (const PodInfo& pod : *pods) {
    if (!seen.emplace(pod.namespace_name, pod.pod, pod.container, pod.vgpu).second) continue;
    rows.rows.push_back(WithPod(rows.identity, pod, entity, options, false));
    rows.usage_rows.push_back(WithPod(rows.identity, pod, entity, options, true));
    rows.usage_uids.push_back(pod.uid);
  }
  rows.usage = PodUsageOf(
      ProcessesOf(view, entity.gpu->index()),
      entity.instance != nullptr ? static_cast<int32_t>(entity.instance->gpu_instance_id()) : -1,
      view.process_pods, rows.usage_uids);
  return rows;
}

// A row of entity `entity` per label set of its rows.
void AppendRows(std::string* out, std::string_view name, const EntityRows& entity,
                std::string_view extra_labels, std::string_view extra_attributes,
                std::string_view value) {
  for (const GpuLabels& labels : entity.rows) {
    AppendSample(out, name, labels, extra_labels, extra_attributes, value);
  }
}

// --kubernetes-virtual-gpus on an entity containers hold: the device's own row of a per-process
// field (DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_GPU_UTIL), then a row per container with its pod's
// usage where it is known. False for any other field or entity: its rows are the usual ones.
bool AppendUsageRows(std::string* out, std::string_view name, FieldId field,
                     const EntityRows& entity, std::string_view value) {
  if ((field != fid::kFbUsed && field != fid::kGpuUtil) || entity.usage_rows.empty()) {
    return false;
  }
  AppendSample(out, name, entity.identity, "", "", value);
  if (!entity.usage.has_value()) return true;
  for (size_t i = 0; i < entity.usage_rows.size(); ++i) {
    auto pod = entity.usage->find(entity.usage_uids[i]);
    if (pod == entity.usage->end()) continue;  // its UID is not known yet
    const std::optional<int64_t>& used =
        field == fid::kFbUsed ? pod->second.fb_used_mib : pod->second.gpu_util_percent;
    if (used.has_value()) {
      AppendSample(out, name, entity.usage_rows[i], "", "", std::to_string(*used));
    }
  }
  return true;
}

// What one counter's rows are drawn from.
struct RowContext {
  const ValueTable& table;
  const std::vector<EntityRows>& entities;
  const ExporterView& view;
  const RenderOptions& options;
};

// A field's rows: one per entity with a value (unsupported or unreadable: omitted, never zero);
// the XID field carries err_code and err_msg.
void AppendFieldRows(const RowContext& context, size_t c, const Counter& counter,
                     std::string* rows) {
  const bool xid_field = counter.field->id == fid::kXidErrors;
  std::string attributes;
  for (size_t g = 0; g < context.table.entities.size(); ++g) {
    const v1::FieldValue* value = context.table.at(g, c);
    if (value == nullptr) continue;
    const std::string text = FormatValue(*value);
    if (text.empty()) continue;
    if (AppendUsageRows(rows, counter.name, counter.field->id, context.entities[g], text)) {
      continue;
    }
    attributes.clear();
    if (xid_field) {
      AppendLabel(&attributes, "err_code", text);
      AppendLabel(&attributes, "err_msg", DcgmExporterXidText(value->int_value()));
    }
    AppendRows(rows, counter.name, context.entities[g], "", attributes, text);
  }
}

// DCGM_EXP_XID_ERRORS_COUNT: per entity and XID code seen in the window, 0 for none.
void AppendXidCountRows(const RowContext& context, const Counter& counter, std::string* rows) {
  std::string window, extra;
  AppendLabel(&window, "window_size_in_ms", std::to_string(context.options.xid_window_ms));
  for (size_t g = 0; g < context.table.entities.size(); ++g) {
    auto counts = context.view.xid_counts.find(context.table.entities[g].gpu->index());
    if (counts == context.view.xid_counts.end() || counts->second.empty()) {
      AppendRows(rows, counter.name, context.entities[g], window, "", "0");
      continue;
    }
    for (const auto& [xid, count] : counts->second) {
      extra = window;
      AppendLabel(&extra, "xid", std::to_string(xid));
      AppendRows(rows, counter.name, context.entities[g], extra, "", std::to_string(count));
    }
  }
}

// DCGM_EXP_CLOCK_EVENTS_COUNT: per entity and clock event reason seen in the window.
void AppendClockEventRows(const RowContext& context, const Counter& counter, std::string* rows) {
  std::string window, extra;
  AppendLabel(&window, "window_size_in_ms", std::to_string(context.options.clock_events_window_ms));
  for (size_t g = 0; g < context.table.entities.size(); ++g) {
    auto counts = context.view.clock_event_counts.find(context.table.entities[g].gpu->index());
    if (counts == context.view.clock_event_counts.end()) continue;
    for (const auto& [bit, name] : ClockEventNames()) {
      auto count = counts->second.find(name);
      if (count == counts->second.end()) continue;
      extra.clear();
      AppendLabel(&extra, "clock_event", name);
      extra += window;
      AppendRows(rows, counter.name, context.entities[g], extra, "", std::to_string(count->second));
    }
  }
}

// DCGM_EXP_GPU_HEALTH_STATUS: per entity, each health system and ALL, with the worst
// incident's code (DCGM_FR_OK when there is none); UNKNOWN has no DCGM value and is left out.
void AppendHealthRows(const RowContext& context, const Counter& counter, std::string* rows) {
  std::string extra;
  for (size_t g = 0; g < context.table.entities.size(); ++g) {
    for (const v1::GpuHealth& gpu : context.view.tick.health().gpus()) {
      if (gpu.gpu() != context.table.entities[g].gpu->index()) continue;
      auto row = [&](std::string_view watch, v1::HealthStatus status, std::string_view code) {
        if (HealthStatusNumber(status) < 0) return;
        extra.clear();
        AppendLabel(&extra, "health_error_code", code);
        AppendLabel(&extra, "health_watch", watch);
        AppendRows(rows, counter.name, context.entities[g], extra, "",
                   std::to_string(HealthStatusNumber(status)));
      };
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

// The GPU series, one family per counter, in the counters' order.
void AppendGpuSeries(const Counters& counters, const ExporterView& view,
                     const RenderOptions& options, std::string* out) {
  const ValueTable table = TableOf(counters, view);
  std::vector<EntityRows> entities;
  entities.reserve(table.entities.size());
  for (size_t e = 0; e < table.entities.size(); ++e) {
    entities.push_back(RowsOf(table, e, counters, view, options));
  }
  const RowContext context{table, entities, view, options};
  std::string rows;
  for (size_t c = 0; c < table.width; ++c) {
    const Counter& counter = counters.counters[c];
    if (counter.is_label()) continue;
    rows.clear();
    if (counter.field != nullptr) {
      AppendFieldRows(context, c, counter, &rows);
    } else if (*counter.exporter == ExporterMetric::kXidErrorsCount) {
      AppendXidCountRows(context, counter, &rows);
    } else if (*counter.exporter == ExporterMetric::kClockEventsCount) {
      AppendClockEventRows(context, counter, &rows);
    } else if (*counter.exporter == ExporterMetric::kGpuHealthStatus) {
      AppendHealthRows(context, counter, &rows);
    }
    if (rows.empty() && counter.exporter != ExporterMetric::kGpuHealthStatus) continue;
    fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", counter.name,
                   counter.help, counter.name, counter.type);
    *out += rows;
  }
}

// The engine's identity and own counters, so a hung or lost GPU read shows as a rate an alert
// can use.
void AppendEngineMetrics(const ExporterView& view, PrometheusText* text) {
  text->Family("vigil_engine_info", MetricType::kGauge, "The engine this exporter reads from.");
  text->Sample("vigil_engine_info",
               {{"node", view.info.node_name()},
                {"instance_id", view.tick.instance_id()},
                {"version", view.info.version()},
                {"backend", view.info.backend()}},
               1);
  text->Single("vigil_engine_seq", MetricType::kGauge,
               "The engine tick these values come from (with instance_id, identifies the state).",
               view.tick.seq());
  const v1::EngineCounters& counters = view.tick.counters();
  text->Single("vigil_engine_gpu_read_failures_total", MetricType::kCounter,
               "Reads of a whole GPU that failed in the engine (lost, hung, ...).",
               counters.gpu_read_failures());
  text->Single("vigil_engine_gpu_read_timeouts_total", MetricType::kCounter,
               "GPU reads in the engine that the driver did not answer in time.",
               counters.gpu_read_timeouts());
  text->Single("vigil_engine_xid_events_total", MetricType::kCounter,
               "XIDs the engine received (injected ones included).", counters.xid_events());
  text->Single("vigil_engine_xid_duplicates_total", MetricType::kCounter,
               "Real XIDs that both NVML's events and the kernel log reported, counted once.",
               counters.xid_duplicates());
  text->Single("vigil_engine_process_read_failures_total", MetricType::kCounter,
               "Compute process lists of a GPU that the engine could not read (per GPU and read).",
               counters.process_read_failures());
  if (counters.kernel_log() != v1::KERNEL_LOG_OFF) {
    text->Single("vigil_engine_kernel_log_up", MetricType::kGauge,
                 "Whether the engine reads the kernel log for the driver's XIDs (1) or cannot (0: "
                 "absent or unreadable, e.g. no CAP_SYSLOG).",
                 counters.kernel_log() == v1::KERNEL_LOG_READING ? 1 : 0);
    text->Single("vigil_engine_kernel_log_xids_total", MetricType::kCounter,
                 "XIDs the engine took from the kernel log.", counters.kernel_log_xids());
    text->Single("vigil_engine_kernel_log_unknown_gpu_total", MetricType::kCounter,
                 "Kernel log XIDs for a PCI bus id that is none of the engine's GPUs.",
                 counters.kernel_log_unknown_gpu());
  }
  text->Single("vigil_engine_persistence_pending_records", MetricType::kGauge,
               "Health state records (FAIL incidents) not yet durable in the engine's state dir.",
               counters.persistence_pending());
  text->Single("vigil_engine_persistence_lag_seconds", MetricType::kGauge,
               "How long the oldest health state record not yet durable has waited.",
               counters.persistence_lag_us() / 1e6, 3);
  text->Single("vigil_engine_persistence_failures_total", MetricType::kCounter,
               "Failed attempts to persist health state (a full or failing disk).",
               counters.persistence_failures());
  if (!view.sxid_counts.empty()) {
    text->Family(
        "vigil_nvswitch_sxid_events_total", MetricType::kCounter,
        "NVSwitch errors (SXids) the engine took from the kernel log, by switch and code.");
    for (const auto& [key, count] : view.sxid_counts) {
      text->Sample("vigil_nvswitch_sxid_events_total",
                   {{"nvswitch", std::to_string(key.nvswitch)},
                    {"pci_bus_id", key.pci_bus_id},
                    {"sxid", std::to_string(key.code)},
                    {"severity", key.fatal ? "fatal" : "non-fatal"}},
                   count);
    }
  }
}

// The health verdict per GPU and system, and per node-level system.
void AppendHealthMetrics(const ExporterView& view, PrometheusText* text) {
  text->Family("vigil_gpu_health_status", MetricType::kGauge,
               "The engine's health verdict per GPU and system: 0 pass, 10 warn, 20 fail, -1 "
               "unknown (no fresh data); injected=\"true\" while an injected fault (a drill) "
               "drives it.");
  for (const v1::GpuHealth& gpu : view.tick.health().gpus()) {
    const std::string index = std::to_string(gpu.gpu());
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
      MetricLabels labels = {{"gpu", index}, {"UUID", gpu.uuid()}, {"system", system.system()}};
      if (injected) labels.emplace_back("injected", "true");
      text->Sample("vigil_gpu_health_status", labels, HealthStatusNumber(system.status()));
    }
  }
  if (view.tick.health().node_systems_size() > 0) {
    text->Family("vigil_node_health_status", MetricType::kGauge,
                 "The engine's health verdict per node-level system (nvswitch: the NVSwitches' "
                 "SXids; nics: the NIC ports as a whole): 0 pass, 10 warn, 20 fail, -1 unknown "
                 "(its source cannot be read).");
    for (const v1::SystemHealth& system : view.tick.health().node_systems()) {
      text->Sample("vigil_node_health_status", {{"system", system.system()}},
                   HealthStatusNumber(system.status()));
    }
  }
}

// A NIC port counter as node_exporter's infiniband collector exports it, so its dashboards carry
// over: the sysfs file, the metric (node_infiniband_ + name), its help, and the factor to its unit
// (the data counters count 4-byte words).
struct PortCounter {
  std::string_view file, name, help;
  uint64_t factor = 1;
};
constexpr PortCounter kPortCounters[] = {
    {"excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors_total",
     "Number of times that OverrunErrors consecutive flow control update periods occurred, each "
     "having at least one overrun error."},
    {"link_downed", "link_downed_total",
     "Number of times the link failed to recover from an error state and went down"},
    {"link_error_recovery", "link_error_recovery_total",
     "Number of times the link successfully recovered from an error state"},
    {"local_link_integrity_errors", "local_link_integrity_errors_total",
     "Number of times that the count of local physical errors exceeded the threshold specified "
     "by LocalPhyErrors."},
    {"port_rcv_data", "port_data_received_bytes_total",
     "Number of data octets received on all links", 4},
    {"port_xmit_data", "port_data_transmitted_bytes_total",
     "Number of data octets transmitted on all links", 4},
    {"port_xmit_discards", "port_discards_transmitted_total",
     "Number of outbound packets discarded by the port because the port is down or congested"},
    {"port_rcv_discards", "port_discards_received_total",
     "Number of inbound packets discarded by the port because the port is down or congested"},
    {"port_xmit_wait", "port_transmit_wait_total",
     "Number of ticks during which the port had data to transmit but no data was sent during the "
     "entire tick"},
    {"port_rcv_errors", "port_errors_received_total",
     "Number of packets containing an error that were received on this port"},
    {"port_rcv_packets", "port_packets_received_total",
     "Number of packets received on all VLs by this port (including errors)"},
    {"port_xmit_packets", "port_packets_transmitted_total",
     "Number of packets transmitted on all VLs from this port (including errors)"},
    {"symbol_error", "symbol_error_total",
     "Number of minor link errors detected on one or more physical lanes."},
    // hw_counters (mlx5): node_exporter's names; its help texts are the driver's long ones.
    {"out_of_buffer", "out_of_buffer_drops_total",
     "Number of drops that occurred due to lack of WQE for the associated QPs"},
    {"rnr_nak_retry_err", "rnr_nak_retry_packets_received_total",
     "Number of received RNR NAK packets (the remote side was not ready)"},
};

// The NIC ports the engine reads, as node_exporter's infiniband collector names their series
// (device and port labels), so its dashboards and alerts carry over; docs/exporter.md says which
// of its series Vigil has. A value the engine could not read is left out, never made up.
void AppendNicPortMetrics(const ExporterView& view, PrometheusText* text) {
  if (view.tick.nic_ports_size() == 0) return;
  struct Port {
    std::string device, port;
    const v1::NicPort* data;
  };
  std::vector<Port> ports;
  for (const v1::NicPort& port : view.tick.nic_ports()) {
    const size_t slash = port.name().rfind('/');
    if (slash == std::string::npos) continue;  // the engine names every port HCA/PORT
    ports.push_back({port.name().substr(0, slash), port.name().substr(slash + 1), &port});
  }
  text->Family("node_infiniband_state_id", MetricType::kGauge,
               "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, "
               "5: act defer)");
  for (const Port& port : ports) {
    if (port.data->state_id() < 0) continue;  // not read
    text->Sample("node_infiniband_state_id", {{"device", port.device}, {"port", port.port}},
                 static_cast<int64_t>(port.data->state_id()));
  }
  text->Family("node_infiniband_physical_state_id", MetricType::kGauge,
               "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: "
               "disable, 4: shift, 5: link up, 6: link error recover, 7: phytest)");
  for (const Port& port : ports) {
    if (port.data->phys_state_id() < 0) continue;
    text->Sample("node_infiniband_physical_state_id",
                 {{"device", port.device}, {"port", port.port}},
                 static_cast<int64_t>(port.data->phys_state_id()));
  }
  text->Family("node_infiniband_rate_bytes_per_second", MetricType::kGauge,
               "Maximum signal transfer rate");
  for (const Port& port : ports) {
    if (port.data->rate_gbps() <= 0) continue;
    text->Sample("node_infiniband_rate_bytes_per_second",
                 {{"device", port.device}, {"port", port.port}},
                 static_cast<uint64_t>(port.data->rate_gbps() * 125'000'000));
  }
  for (const PortCounter& counter : kPortCounters) {
    const std::string name = fmt::format("node_infiniband_{}", counter.name);
    bool any = false;
    for (const Port& port : ports) {
      auto value = port.data->counters().find(std::string(counter.file));
      if (value == port.data->counters().end()) continue;
      if (!any) text->Family(name, MetricType::kCounter, counter.help);
      any = true;
      text->Sample(name, {{"device", port.device}, {"port", port.port}},
                   value->second * counter.factor);
    }
  }
  // Vigil's own: which GPUs each port serves, for joins with the GPU series.
  text->Family("vigil_nic_port_info", MetricType::kGauge,
               "A NIC port the engine reads: its link layer, netdev, PCI function and the GPUs it "
               "serves (a comma-separated list of indexes; empty: the node's). Always 1.");
  for (const Port& port : ports) {
    const std::string gpus = fmt::format("{}", fmt::join(port.data->gpus(), ","));
    text->Sample("vigil_nic_port_info",
                 {{"device", port.device},
                  {"port", port.port},
                  {"link_layer", port.data->link_layer()},
                  {"netdev", port.data->netdev()},
                  {"pci_bus_id", port.data->pci_bus_id()},
                  {"gpus", gpus},
                  {"attachment", port.data->attachment()}},
                 1);
  }
}

}  // namespace

std::string RenderMetrics(const Counters& counters, const ExporterView& view,
                          const RenderOptions& options) {
  std::string out;
  out.reserve(view.gpus.size() * counters.counters.size() * 260 + 4096);
  if (view.engine_up) AppendGpuSeries(counters, view, options, &out);
  // Vigil's own metrics: always present, so "the engine is down" is visible.
  PrometheusText text(&out);
  text.Single("vigil_engine_up", MetricType::kGauge,
              "Whether the exporter holds fresh data from its engine (1) or not (0).",
              view.engine_up ? 1 : 0);
  if (view.engine_up) {
    AppendEngineMetrics(view, &text);
    AppendHealthMetrics(view, &text);
    AppendNicPortMetrics(view, &text);
  }
  return out;
}

}  // namespace vigil
