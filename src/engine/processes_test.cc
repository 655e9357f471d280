// Tests of the engine's process lists on the simulated backend and a fake clock: read with GPU
// utilisation, each GPU's own, kept between reads, unknown (not "none") for a lost GPU, and a
// process that ends leaves the next list.
#include "backend/sim_backend.h"
#include "engine/engine.h"
#include "engine/test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;

class ProcessesTest : public SimEngineTest {
 protected:
  void SetUp() override { StartEngine(1, {.gpu_count = 3, .seed = 3}); }
  const std::vector<GpuProcessList>& Lists() {
    latest_ = engine_->Latest();
    EXPECT_NE(latest_->processes, nullptr);
    return *latest_->processes;
  }
  std::shared_ptr<const Snapshot> latest_;
};

TEST_F(ProcessesTest, EachGpusProcessesAreReadAndAnEndedOneLeavesTheList) {
  const GpuProcess a{.pid = 4242, .used_memory_bytes = 3ull << 30, .sm_util = 55};
  const GpuProcess b{.pid = 4343, .used_memory_bytes = 1ull << 30, .sm_util = 20};
  sim_->SetProcesses(2, {a, b});
  Tick(2);
  const std::vector<GpuProcessList>& lists = Lists();
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_TRUE(lists[0].known);
  EXPECT_TRUE(lists[0].processes.empty()) << "known to be none";
  EXPECT_TRUE(lists[2].known);
  EXPECT_THAT(lists[2].processes, ElementsAre(a, b));

  sim_->SetProcesses(2, {b});  // a's pod ended
  Tick(2);
  EXPECT_THAT(Lists()[2].processes, ElementsAre(b));
}

TEST_F(ProcessesTest, ALostGpusProcessesAreUnknownNotNone) {
  sim_->SetProcesses(1, {{.pid = 7}});
  Tick(2);
  ASSERT_TRUE(Lists()[1].known);
  EXPECT_EQ(latest_->counters.process_read_failures, 0u);
  sim_->SetGpuLost(1, true);
  Tick(2);
  EXPECT_FALSE(Lists()[1].known);
  EXPECT_GT(latest_->counters.process_read_failures, 0u) << "counted, for the exporter's rate";
  EXPECT_TRUE(Lists()[1].processes.empty());
  EXPECT_TRUE(Lists()[0].known) << "the others are read";
}

}  // namespace
}  // namespace vigil
