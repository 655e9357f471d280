// Tests of Engine::ResetGpu on the simulated backend and a fake clock: the guards (GPU, UUID,
// compute processes, one at a time), the audit trail, and the verdict clearing from the reset
// the engine sees in the GPU's counters.
#include "backend/sim_backend.h"
#include "engine/engine.h"
#include "engine/test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

const Principal& kRoot = kTestRoot;

class ResetGpuTest : public SimEngineTest {
 protected:
  void SetUp() override { StartEngine(3); }

  HealthStatus Status(uint32_t gpu) { return engine_->Health()->gpus[gpu].status; }
};

TEST_F(ResetGpuTest, AResetEndsAStickyFailureOnceTheEngineSeesIt) {
  sim_->RaiseXid(0, 48, clock_.Now());  // a double-bit ECC error: FAIL until a reset
  Tick(2);
  ASSERT_EQ(Status(0), HealthStatus::kFail);
  Tick(30);
  ASSERT_EQ(Status(0), HealthStatus::kFail) << "sticky";

  auto reset = engine_->ResetGpu(0, engine_->gpus()[0].uuid, "remediation of XID 48", kRoot);
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_EQ(reset->uuid, engine_->gpus()[0].uuid);
  EXPECT_THAT(reset->output, HasSubstr("was reset"));
  EXPECT_EQ(sim_->resets(), 1);
  // The sticky FAIL ends when the engine reads the counters that went back, not before.
  for (int tick = 0; tick < 60 && Status(0) != HealthStatus::kPass; ++tick) Tick();
  EXPECT_EQ(Status(0), HealthStatus::kPass);
  EXPECT_EQ(Status(1), HealthStatus::kPass);

  const auto audit = events_->Messages(EventKind::kGpuReset);
  ASSERT_EQ(audit.size(), 2u);
  EXPECT_THAT(audit[0], HasSubstr("reset requested by uid 0 (root) (remediation of XID 48)"));
  EXPECT_THAT(audit[1], HasSubstr("reset done in"));
}

TEST_F(ResetGpuTest, AResetEndsTheInjectionsOnThatGpuOnly) {
  ASSERT_TRUE(engine_->InjectField({.gpu = 0, .field = fid::kGpuTemp, .value = 99}, kRoot).ok());
  ASSERT_TRUE(engine_->InjectField({.gpu = 1, .field = fid::kGpuTemp, .value = 98}, kRoot).ok());
  auto reset = engine_->ResetGpu(0, "", "", kRoot);
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_THAT(reset->injections_cleared, ::testing::ElementsAre("inj-1"));
  ASSERT_EQ(engine_->Injections().size(), 1u);
  EXPECT_EQ(engine_->Injections()[0].gpu, 1u);
  EXPECT_THAT(events_->Messages(EventKind::kInjectionCleared)[0], HasSubstr("GPU reset"));
}

TEST_F(ResetGpuTest, AGpuInUseIsNotReset) {
  sim_->SetProcesses(1, {{.pid = 4242}, {.pid = 4343, .gpu_instance = 1}});
  auto reset = engine_->ResetGpu(1, "", "", kRoot);
  EXPECT_EQ(reset.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reset.status().message(),
              HasSubstr("in use by 2 compute processes (pid 4242, 4343): not reset; drain"));
  EXPECT_EQ(sim_->resets(), 0);
  EXPECT_TRUE(events_->Messages(EventKind::kGpuReset).empty()) << "nothing was attempted";
}

TEST_F(ResetGpuTest, ALostGpuCannotBeProvenIdleAndIsNotReset) {
  sim_->SetGpuLost(0, true);
  auto reset = engine_->ResetGpu(0, "", "", kRoot);
  EXPECT_EQ(reset.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(reset.status().message(), HasSubstr("cannot tell whether a compute process"));
  EXPECT_EQ(sim_->resets(), 0);
}

TEST_F(ResetGpuTest, TheWrongGpuIsRefused) {
  EXPECT_EQ(engine_->ResetGpu(2, "", "", kRoot).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto other = engine_->ResetGpu(0, engine_->gpus()[1].uuid, "", kRoot);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(other.status().message(), HasSubstr("not reset"));
  EXPECT_EQ(sim_->resets(), 0);
}

}  // namespace
}  // namespace vigil
