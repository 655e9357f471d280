// Tests the nvml backend in this process on the fake libnvidia-ml, with an injected clock: a GPU
// that NVML could not open is tried again, at most every kReopenInterval.
#include "backend/nvml_backend.h"

#include <memory>
#include <string>

#include "backend/nvml_loader.h"
#include "common/clock.h"
#include "common/status.h"
#include "fake_nvml/script.h"
#include "fields/catalogue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kGpuIsLost = 15;  // NVML_ERROR_GPU_IS_LOST

class NvmlBackendTest : public ::testing::Test {
 protected:
  void Start() {
    script_.Write();
    auto library = OpenNvml(FakeNvmlDir() + "/current/libnvidia-ml.so.1");
    ASSERT_TRUE(library.ok()) << library.status();
    auto backend = NvmlBackend::Create(
        std::move(*library), &clock_,
        {.command = FakeNvidiaSmi() + " --gpu-reset -i {uuid}", .limit = absl::Seconds(30)});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }
  // GPU `gpu`'s temperature, or the read's failure.
  absl::StatusOr<int64_t> Temperature(uint32_t gpu) {
    const FieldId field = fid::kGpuTemp;
    FieldValue value;
    const absl::Status read = backend_->Read(gpu, absl::MakeConstSpan(&field, 1), clock_.Now(),
                                             absl::MakeSpan(&value, 1));
    if (!read.ok()) return read;
    if (!value.ok()) return absl::InternalError("no value");
    return value.as_int();
  }

  TempDir dir_;
  FakeNvmlScript script_{dir_.File("fake-nvml.json"), 2};
  FakeClock clock_;
  std::unique_ptr<NvmlBackend> backend_;
};

// A GPU NVML could not open at start has no identity the engine could serve: when it opens later
// its error says to restart the engine (once it has been tried again, not before).
TEST_F(NvmlBackendTest, AGpuThatOpensOnlyAfterTheStartAsksForARestart) {
  script_.gpu(1)["open_error"] = kGpuIsLost;
  Start();
  ASSERT_EQ(backend_->gpus().size(), 2u);
  EXPECT_EQ(backend_->gpus()[1].name, "unavailable");
  EXPECT_EQ(Temperature(1).status().code(), absl::StatusCode::kUnavailable);
  script_.gpu(1).erase("open_error");
  script_.Write();
  clock_.Advance(NvmlBackend::kReopenInterval / 2);
  EXPECT_THAT(MessageOf(Temperature(1).status()), ::testing::Not(HasSubstr("restart")));
  clock_.Advance(NvmlBackend::kReopenInterval / 2);
  const absl::StatusOr<int64_t> opens = Temperature(1);
  EXPECT_EQ(opens.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(MessageOf(opens.status()), HasSubstr("NVML opens it now: restart the engine"));
  EXPECT_EQ(*Temperature(0), 40);
}

// A GPU that NVML does not list again after a reset is known by its UUID: once NVML opens it
// again it is read again, without a restart.
TEST_F(NvmlBackendTest, AGpuLostToAResetIsReadAgainOnceNvmlOpensIt) {
  Start();
  ASSERT_EQ(*Temperature(1), 41);
  script_.gpu(1)["open_error"] = kGpuIsLost;  // as the reset of GPU 0 leaves it
  script_.Write();
  const absl::StatusOr<std::string> reset = backend_->ResetGpu(0);
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_THAT(MessageOf(Temperature(1).status()), HasSubstr("not found again after a GPU reset"));
  script_.gpu(1).erase("open_error");
  script_.Write();
  EXPECT_EQ(Temperature(1).status().code(), absl::StatusCode::kUnavailable)
      << "not before kReopenInterval";
  clock_.Advance(NvmlBackend::kReopenInterval);
  EXPECT_EQ(*Temperature(1), 41);
  EXPECT_EQ(*Temperature(0), 40);
}

// A GPU's compute processes with what the driver says of each: the memory it holds (or nothing,
// where NVML cannot say), its SM share in its latest sample (0 for a process the driver sampled
// none of; nothing where the driver cannot say), and on a MIG GPU the instance it runs on.
TEST_F(NvmlBackendTest, ProcessesComeWithTheirMemoryAndSmShare) {
  script_.gpu(0)["processes"] = {
      {{"pid", 4242}, {"memory", 3ull << 30}, {"sm_util", 55}},
      {{"pid", 4343}, {"memory", 1ull << 29}, {"sm_util", 20}},
      {{"pid", 4444}, {"memory", nullptr}},  // NVML_VALUE_NOT_AVAILABLE, no sample
  };
  script_.gpu(1)["processes"] = {{{"pid", 5151}, {"sm_util", 70}}};
  script_.gpu(1)["no_process_utilization"] = true;
  Start();
  auto processes = backend_->ReadProcesses(0);
  ASSERT_TRUE(processes.ok()) << processes.status();
  EXPECT_THAT(*processes,
              ::testing::ElementsAre(
                  GpuProcess{.pid = 4242, .used_memory_bytes = 3ull << 30, .sm_util = 55},
                  GpuProcess{.pid = 4343, .used_memory_bytes = 1ull << 29, .sm_util = 20},
                  GpuProcess{.pid = 4444, .sm_util = 0}));
  processes = backend_->ReadProcesses(1);
  ASSERT_TRUE(processes.ok()) << processes.status();
  EXPECT_THAT(*processes,
              ::testing::ElementsAre(GpuProcess{.pid = 5151, .used_memory_bytes = 1ull << 30}))
      << "a driver without per-process utilisation: the list, without a share";
}

TEST_F(NvmlBackendTest, AMigGpusProcessesNameTheirInstance) {
  script_.gpu(0)["mig"] = {{"mode", 1},
                           {"instances",
                            {{{"gpu_instance", 1},
                              {"compute_instance", 0},
                              {"profile", "3g.40gb"},
                              {"uuid", "MIG-11111111-2222-3333-4444-555555555555"},
                              {"placement", {0, 4}},
                              {"processes", {{{"pid", 7001}, {"memory", 5ull << 30}}, 7002}}},
                             {{"gpu_instance", 2},
                              {"compute_instance", 0},
                              {"profile", "3g.40gb"},
                              {"uuid", "MIG-66666666-2222-3333-4444-555555555555"},
                              {"placement", {4, 4}},
                              {"processes", {{{"pid", 7003}, {"memory", 1ull << 30}}}}}}}};
  Start();
  auto mig = backend_->ReadMig(0);
  ASSERT_TRUE(mig.ok()) << mig.status();
  auto processes = backend_->ReadProcesses(0);
  ASSERT_TRUE(processes.ok()) << processes.status();
  EXPECT_THAT(*processes,
              ::testing::ElementsAre(
                  GpuProcess{.pid = 7001, .used_memory_bytes = 5ull << 30, .gpu_instance = 1},
                  GpuProcess{.pid = 7002, .used_memory_bytes = 1ull << 30, .gpu_instance = 1},
                  GpuProcess{.pid = 7003, .used_memory_bytes = 1ull << 30, .gpu_instance = 2}))
      << "no SM share on MIG: the driver gives it for whole GPUs only";
}

}  // namespace
}  // namespace vigil::testing
