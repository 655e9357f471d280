// Implements the DGX-style fake sysfs layout of the end-to-end tests.
#include "dgx_sysfs.h"

#include <vector>

#include "fmt/format.h"

namespace vigil::testing {

std::string PciFunction(int bus, int device) {
  return fmt::format("0000:{:02x}:{:02x}.0", bus, device);
}

void LayOutDgx(FakeSysfs* sysfs) {
  for (int i = 0; i < 8; ++i) {
    const int bus = kSimBuses[i];
    const std::vector<std::string> above = {fmt::format("pci0000:{:02x}", bus - 3),
                                            PciFunction(bus - 3, 1), PciFunction(bus - 2, 0)};
    std::vector<std::string> gpu = above, hca = above;
    gpu.insert(gpu.end(), {PciFunction(bus - 1, 0), PciFunction(bus, 0)});
    hca.insert(hca.end(), {PciFunction(bus - 1, 1), PciFunction(bus + 1, 0)});
    sysfs->AddPciFunction(gpu, i < 4 ? 0 : 1);
    sysfs->AddPciFunction(hca, i < 4 ? 0 : 1);
    sysfs->AddHca(fmt::format("mlx5_{}", i), hca.back(), {FakeSysfs::Port{}});
  }
  sysfs->AddPciFunction({"pci0000:e0", "0000:e0:01.0", "0000:e1:00.0"}, 1);
  FakeSysfs::Port roce{.rate = "200 Gb/sec (4X HDR)", .link_layer = "Ethernet"};
  sysfs->AddHca("mlx5_8", "0000:e1:00.0", {roce, roce}, "ens8f0np0");
}

}  // namespace vigil::testing
