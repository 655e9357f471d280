// Which DRA device is which GPU: reads the devices a DRA driver publishes for this node in its
// ResourceSlices (NVIDIA's `gpu.nvidia.com` by default) and matches them to the engine's GPUs and
// MIG instances by their attributes — the UUID first, else the PCI bus id — never by the number
// in a device's name (the driver names a GPU `gpu-<minor>`, and minors need not follow NVML's
// indexes). Any served shape of a slice is read: resource.k8s.io/v1 and v1beta2 keep a device's
// attributes at `attributes`, v1beta1 and v1alpha3 under `basic`; an attribute may be named with
// or without the driver's domain (`uuid` or `gpu.nvidia.com/uuid`), and the PCI bus id is
// `resource.kubernetes.io/pciBusID` (the driver from v25.12) or `pcieBusID` (before).
// Pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/remediation.h"
#include "nlohmann/json.hpp"

namespace vigil::dra {

using ::vigil::kNvidiaGpuDriver;  // NVIDIA's DRA driver for GPUs (api/remediation.h)

// A device as a DRA driver publishes it.
struct Device {
  std::string driver, pool, name;  // what a DeviceTaintRule's selector and a claim name
  std::string type;                // "gpu", "mig", or whatever the driver says ("" when unsaid)
  std::string uuid;                // "GPU-…" or "MIG-…"
  std::string pci_bus_id;          // normalized, "0000:3b:00.0" ("" when unsaid)
  std::string parent_uuid;         // a MIG device's GPU

  bool operator==(const Device&) const = default;
};

// The devices of `driver` on node `node` in `slices` (ResourceSlice objects of any served
// version), in the slices' order. A slice of another driver or node, or one without devices, adds
// none; a device without a name is skipped.
std::vector<Device> DevicesOf(const std::vector<nlohmann::json>& slices, std::string_view driver,
                              std::string_view node);

// An engine GPU or MIG instance to be matched.
struct GpuRef {
  uint32_t gpu = 0;
  std::optional<uint32_t> gpu_instance;  // a MIG GPU instance of `gpu`
  std::string uuid;
  std::string pci_bus_id;  // the GPU's (NVML's form is fine); "" for an instance
};

enum class MatchedBy : uint8_t { kUuid, kPciBusId };
std::string_view MatchedByName(MatchedBy matched_by);  // "uuid", "pciBusID"

struct Match {
  GpuRef gpu;
  Device device;
  MatchedBy matched_by = MatchedBy::kUuid;
};

struct DeviceMap {
  std::vector<Match> matches;          // in the order of the GpuRefs given
  std::vector<GpuRef> unmatched_gpus;  // no device says it is this GPU
  std::vector<Device> unmatched_devices;

  // The device of GPU `gpu` (whole GPU, or its GPU instance), if matched.
  const Device* Find(uint32_t gpu, std::optional<uint32_t> gpu_instance = std::nullopt) const;
  // The UUID of the GPU or MIG instance that device `name` of `driver`'s pool `pool` is; "" when
  // no engine GPU matched it (a claim's device that is not one of this node's GPUs).
  std::string UuidOf(std::string_view driver, std::string_view pool, std::string_view name) const;
};

// Matches each GpuRef to the device whose `uuid` attribute is its UUID; a whole GPU whose UUID no
// device carries, to the one device of type gpu (or untyped) with its PCI bus id. A device
// matches at most one GpuRef.
DeviceMap MapDevices(const std::vector<GpuRef>& gpus, const std::vector<Device>& devices);

}  // namespace vigil::dra
