// Fuzz target of the counters file (dcgm-exporter's CSV, --collectors; testing/fuzz.h): the
// default counters mutated and random lines. For any input: counters, each named and typed, or
// one error that names the file and line, never a crash (ASan in `make fuzz`).
#include "testing/fuzz.h"

#include "exporter/counters.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(ExporterFuzzTest, CountersFilesParseOrNameTheirLine) {
  const std::vector<std::string> seeds = {
      std::string(DefaultCountersCsv()),
      "# Format\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
      "DCGM_FI_DRIVER_VERSION, label, Driver Version\nDCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs\n"};
  const testing::FuzzRun run =
      testing::Fuzz("counters csv", seeds, "DCGM_FI_DEV_EXP, #\ngaugecounterlabel()0123456789",
                    50'000, [](const std::string& input) {
                      const absl::StatusOr<Counters> counters = ParseCounters(input, "c.csv");
                      if (!counters.ok()) {
                        EXPECT_EQ(counters.status().message().substr(0, 6), "c.csv:") << input;
                        return false;
                      }
                      for (const Counter& counter : counters->counters) {
                        EXPECT_FALSE(counter.name.empty()) << input;
                        EXPECT_FALSE(counter.type.empty()) << input;
                      }
                      return true;
                    });
  EXPECT_GT(run.accepted, run.inputs / 100);
}

}  // namespace
}  // namespace vigil
