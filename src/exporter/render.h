// Renders the exporter's /metrics text: dcgm-exporter's exact shape (names, HELP/TYPE once per
// metric, label names and order, ints as integers, doubles with six decimals, unsupported values
// left out, err_msg its XID texts: fields/xid_texts.h) — plus label values escaped per the
// Prometheus text format, which dcgm-exporter does
// not do (a model name with a quote would break its scrape) — followed by Vigil's own metrics.
// A pure function of its inputs, so golden tests pin the output byte for byte. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/prometheus_text.h"  // EscapeLabelValue, for the exporter's callers
#include "exporter/counters.h"
#include "exporter/pod_usage.h"
#include "podresources/pod_info.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {

// Everything one render needs, as the exporter holds it.
struct ExporterView {
  bool engine_up = false;
  std::string engine_down_reason;
  v1::EngineInfo info;        // valid when engine_up
  std::vector<v1::Gpu> gpus;  // index order
  v1::TickUpdate tick;        // the latest tick, with its health verdict
  // Per GPU index: XIDs seen within the XID window, by code; clock event reasons seen within the
  // clock-events window, by name.
  std::map<uint32_t, std::map<uint32_t, uint64_t>> xid_counts;
  std::map<uint32_t, std::map<std::string, uint64_t>> clock_event_counts;
  // NVSwitch errors the followed engine instance reported, by switch and code.
  struct SxidKey {
    uint32_t nvswitch;
    std::string pci_bus_id;
    uint32_t code;
    bool fatal;
    auto operator<=>(const SxidKey&) const = default;
  };
  std::map<SxidKey, uint64_t> sxid_counts;
  // The gpus' MIG instances have series of their own (GPU_I_PROFILE, GPU_I_ID) instead of the
  // GPU's; the tick has their values (FieldValue.gpu_instance).
  // By the kubelet's device id (GPU UUID, "nvidia0", MIG UUID, ...): the containers it lists.
  GpuPodMap pods;
  // --kubernetes-virtual-gpus: the pod of each process in tick.processes.
  ProcessPods process_pods;
};

// dcgm-exporter's --kubernetes-gpu-id-type: how the kubelet's device plugin names whole GPUs.
enum class GpuIdType { kUid, kDeviceName };

struct RenderOptions {
  std::string hostname_label = "Hostname";  // "hostname" for dcgm-exporter >= 4.8.3's spelling
  std::string hostname;                     // the value; omitted when empty (--no-hostname)
  int64_t xid_window_ms = 300'000;
  int64_t clock_events_window_ms = 300'000;
  GpuIdType gpu_id_type = GpuIdType::kUid;
  // dcgm-exporter's --use-old-namespace: its 1.x label names — uuid for UUID, pod_name,
  // pod_namespace and container_name for the pod labels (metric names do not change).
  bool old_namespace = false;
  // dcgm-exporter's --kubernetes-enable-pod-uid: pod-attributed series carry pod_uid (last of
  // the pod labels, sorted after pod / pod_namespace), "" when the UID is not known.
  bool pod_uid = false;
  // dcgm-exporter's --kubernetes-virtual-gpus (#594): a device the kubelet gave several
  // containers (a time-sliced or shared GPU, a shared MIG instance) has each series once per
  // container (with vgpu, the replica), where without it the last container's labels are the
  // device's; and DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_GPU_UTIL keep the device's own series and
  // add one per container with its pod's usage (pod_uid always): exporter/pod_usage.h.
  bool virtual_gpus = false;
};

// The GPU series and the engine metrics (everything that changes once per tick).
std::string RenderMetrics(const Counters& counters, const ExporterView& view,
                          const RenderOptions& options);

// The names dcgm-exporter gives the clock event reason bits (field 112), in bit order.
const std::vector<std::pair<int64_t, std::string>>& ClockEventNames();

}  // namespace vigil
