// Tests of what nvml_api.cc decides without a driver: the size of the entries the compute
// processes query writes, per driver version.
#include "backend/nvml_api.h"

#include "gtest/gtest.h"

namespace vigil::nvml {
namespace {

TEST(NvmlApiTest, OnlyThe535DriversFrom43To97WriteProtectedMemoryEntriesFromV3) {
  const struct {
    const char* version;
    bool v3;
    size_t size;
  } cases[] = {
      {"530.41.03", true, 24},  {"535.43.02", true, 32}, {"535.54.03", true, 32},
      {"535.86.10", true, 32},  {"535.97.99", true, 32}, {"535.98", true, 24},
      {"535.104.05", true, 24}, {"550.54.15", true, 24}, {"535.54.03", false, 24},
      {"", true, 24},           {"garbage", true, 24},   {"535", true, 24},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ProcessInfoSize(c.version, c.v3), c.size) << c.version << " v3=" << c.v3;
  }
}

}  // namespace
}  // namespace vigil::nvml
