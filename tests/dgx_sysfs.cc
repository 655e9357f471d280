// Implements the DGX-style fake sysfs layout of the end-to-end tests.
#include "dgx_sysfs.h"

#include <vector>

#include "common/check.h"
#include "fmt/format.h"

namespace vigil::testing {

std::string PciFunction(int bus, int device) {
  return fmt::format("0000:{:02x}:{:02x}.0", bus, device);
}

void LayOutDgx(FakeSysfs* sysfs) {
  std::vector<std::string> gpus;  // as NVML and the sim name them
  for (int bus : kSimBuses) gpus.push_back(fmt::format("00000000:{:02X}:00.0", bus));
  VIGIL_CHECK(network::LayOutSimRails(sysfs->tree(), gpus, 8).ok());
  sysfs->AddPciFunction({"pci0000:e0", "0000:e0:01.0", "0000:e1:00.0"}, 1);
  FakeSysfs::Port roce{.rate = "200 Gb/sec (4X HDR)", .link_layer = "Ethernet"};
  sysfs->AddHca("mlx5_8", "0000:e1:00.0", {roce, roce}, "ens8f0np0");
}

}  // namespace vigil::testing
