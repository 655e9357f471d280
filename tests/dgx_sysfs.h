// A fake sysfs tree laid out as a DGX-style node for the end-to-end tests: 8 GPUs at the simulated
// GPUs' bus ids (backend/sim_gpu.cc: a DGX H100's), each behind a PCIe switch with its rail HCA
// (mlx5_0 .. mlx5_7, one InfiniBand port each), and a dual-port RoCE HCA (mlx5_8, netdev
// ens8f0np0) on its own root port on NUMA node 1. Not thread-safe; one per test.
#pragma once

#include <string>

#include "network/fake_sysfs.h"

namespace vigil::testing {

// The simulated GPUs' PCI buses, GPU 0 first.
inline constexpr int kSimBuses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

// "0000:BB:DD.0".
std::string PciFunction(int bus, int device);

// GPU i at 0000:BUS:00.0 and rail HCA mlx5_i at 0000:BUS+1:00.0, behind one switch; the RoCE HCA
// at 0000:e1:00.0.
void LayOutDgx(FakeSysfs* sysfs);

}  // namespace vigil::testing
