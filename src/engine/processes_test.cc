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
  sim_->SetGpuLost(1, true);
  Tick(2);
  EXPECT_FALSE(Lists()[1].known);
  EXPECT_EQ(latest_->counters.process_read_failures, 0u) << "the GPU's read failure says it";
  EXPECT_TRUE(Lists()[1].processes.empty());
  EXPECT_TRUE(Lists()[0].known) << "the others are read";
}

// A list refused while the GPU's fields answer (NO_PERMISSION, as NVML refuses an unprivileged
// caller a MIG GPU's processes): unknown, counted per read, and known again once it answers.
TEST_F(ProcessesTest, AListRefusedAloneIsUnknownAndCounted) {
  sim_->SetProcesses(1, {{.pid = 7}});
  Tick(2);
  ASSERT_TRUE(Lists()[1].known);
  EXPECT_EQ(latest_->counters.process_read_failures, 0u);
  sim_->FailProcessLists(1, absl::PermissionDeniedError("NVML: insufficient permissions"));
  Tick(2);
  EXPECT_FALSE(Lists()[1].known);
  EXPECT_TRUE(Lists()[0].known);
  const uint64_t failures = latest_->counters.process_read_failures;
  EXPECT_GT(failures, 0u) << "counted, for the exporter's rate";
  sim_->FailProcessLists(1, absl::OkStatus());
  Tick(2);
  EXPECT_TRUE(Lists()[1].known);
  EXPECT_THAT(Lists()[1].processes, ElementsAre(GpuProcess{.pid = 7}));
  EXPECT_EQ(latest_->counters.process_read_failures, failures) << "no more once it answers";
}

}  // namespace
}  // namespace vigil
