// Tests of the PCI bus id's normal form: every writer's form becomes sysfs's, anything else "".
#include "common/pci_bus_id.h"

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(PciBusIdTest, EveryWritersFormBecomesSysfssAndAnythingElseNothing) {
  EXPECT_EQ(NormalizePciBusId("00000000:3B:00.0"), "0000:3b:00.0");  // NVML
  EXPECT_EQ(NormalizePciBusId("0000:3b:00.0"), "0000:3b:00.0");      // DRA, sysfs
  EXPECT_EQ(NormalizePciBusId("3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("0001:9A:1F.7"), "0001:9a:1f.7");
  EXPECT_EQ(NormalizePciBusId("GPU-1234"), "");
  EXPECT_EQ(NormalizePciBusId("0000:3b:00"), "");
  EXPECT_EQ(NormalizePciBusId("0000:zz:00.0"), "");
  EXPECT_EQ(NormalizePciBusId("100000000:3b:00.0"), "") << "a domain above 0xffff";
}

}  // namespace
}  // namespace vigil
