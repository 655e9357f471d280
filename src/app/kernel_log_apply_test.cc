// Tests that a kernel-log XID is counted exactly once however the engine dies: the apply path as
// `vigil engine` wires it (the kernel log's source feeding the engine, whose incident store and
// the source's replay state share the state dir) runs on a FaultEnv that crashes after each of
// its disk operations in turn; a restarted engine on the same log and state dir then holds the
// XID's incident with a count of one — never lost, never counted twice. Everything runs on this
// thread but the incident store's writer, which the test waits for.
#include <filesystem>
#include <fstream>

#include "backend/sim_backend.h"
#include "common/check.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kmsg/kernel_log_xids.h"
#include "testing/eventually.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

constexpr char kBoot[] = "6b4c1a55-one-boot";

// One run of the engine and its kernel-log source over `env`.
struct EngineRun {
  EngineRun(const std::filesystem::path& dir, Env* env, FakeClock* clock) {
    auto sim = SimBackend::Create({.gpu_count = 4, .seed = 3});
    VIGIL_CHECK(sim.ok());
    auto created = Engine::Create({.node_name = "n1",
                                   .clock = clock,
                                   .state_dir = dir.string(),
                                   .boot_id = kBoot,
                                   .env = env},
                                  std::move(*sim));
    VIGIL_CHECK(created.ok());
    engine = std::move(*created);
    log = std::make_unique<kmsg::KernelLogXids>(
        kmsg::KernelLogXidsOptions{.path = (dir / "kmsg").string(),
                                   .state_path = (dir / "kmsg.state").string(),
                                   .boot_id = kBoot,
                                   .clock = clock,
                                   .env = env,
                                   .monotonic_now = [] { return absl::Seconds(100); }},
        engine->gpus(), engine.get());
  }
  // The source first, as RunningEngine::Stop() does.
  ~EngineRun() {
    log.reset();
    engine.reset();
  }
  // GPU 2's XID 79 incident, if its verdict has one.
  std::optional<Incident> Xid79() const {
    for (const SystemHealth& system : engine->Health()->gpus[2].systems) {
      for (const Incident& incident : system.incidents) {
        if (incident.key == "xid.79") return incident;
      }
    }
    return std::nullopt;
  }

  std::unique_ptr<Engine> engine;
  std::unique_ptr<kmsg::KernelLogXids> log;
};

class KernelLogApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // An XID 79 for GPU 2 (the simulated GPUs sit at a DGX H100's buses: GPU 2 at 3a:00).
    std::ofstream(dir_.path() / "kmsg")
        << "6,1,1000,-;Linux version 6.1.0-18-amd64\n"
           "4,2,50000000,c;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU "
           "has fallen off the bus.\n";
  }

  // Runs the apply path to its end on `env` from a state dir without state: the log read, the
  // XID evaluated at a tick, its incident persisted, the XID settled and written down as
  // applied; `env` crashes after `crash_after` of its operations, if given. Returns what the path
  // asked of the disk once the engine had started.
  std::vector<std::string> Apply(testing::FaultEnv* env, std::optional<int> crash_after) {
    std::filesystem::remove(dir_.path() / "health.log");
    std::filesystem::remove(dir_.path() / "kmsg.state");
    FakeClock clock;
    EngineRun run(dir_.path(), env, &clock);
    const size_t started = env->Operations().size();
    if (crash_after.has_value()) env->CrashAfter(*crash_after);
    run.log->CatchUp();
    clock.Advance(absl::Seconds(1));
    run.engine->RunTick();
    EXPECT_TRUE(run.Xid79().has_value()) << "served from memory at once";
    EXPECT_TRUE(testing::Eventually(
        [&] { return run.engine->Counters().persistence_pending == 0 || env->crashed(); }));
    clock.Advance(kmsg::kSettle + absl::Seconds(1));
    run.log->Stop();  // writes the settled XID down
    const std::vector<std::string> operations = env->Operations();
    return {operations.begin() + static_cast<std::ptrdiff_t>(started), operations.end()};
  }

  testing::TempDir dir_;
};

TEST_F(KernelLogApplyTest, AnXidIsCountedExactlyOnceWhereverTheEngineDies) {
  // The path without a crash: what it writes, in order.
  testing::FaultEnv whole;
  const std::vector<std::string> path = Apply(&whole, std::nullopt);
  ASSERT_FALSE(whole.crashed());
  EXPECT_THAT(path, ::testing::IsSupersetOf(
                        {"append health.log", "sync health.log", "rename kmsg.state.tmp"}))
      << ::testing::PrintToString(path);
  const int steps = static_cast<int>(path.size());

  for (int crash_after = 0; crash_after <= steps; ++crash_after) {
    SCOPED_TRACE(::testing::Message() << "the engine dies after " << crash_after << " of "
                                      << ::testing::PrintToString(path));
    testing::FaultEnv env;
    Apply(&env, crash_after);
    EXPECT_EQ(env.crashed(), crash_after < steps);
    // Restarted in the same boot, on the same log and state dir, later.
    FakeClock later(absl::FromUnixSeconds(1'800'000'600));
    EngineRun restarted(dir_.path(), Env::Default(), &later);
    restarted.log->CatchUp();
    later.Advance(absl::Seconds(1));
    restarted.engine->RunTick();
    const std::optional<Incident> incident = restarted.Xid79();
    ASSERT_TRUE(incident.has_value()) << "the XID was lost";
    EXPECT_EQ(incident->status, HealthStatus::kFail);
    EXPECT_EQ(incident->count, 1u) << "the XID was counted twice";
    ASSERT_TRUE(incident->log_position.has_value());
    EXPECT_EQ(incident->log_position->sequence, 2u);
    // Counted again in this run exactly when the dead one had not made its count durable.
    const bool counted_again = restarted.engine->Counters().xid_events == 1;
    if (crash_after == 0) {
      EXPECT_TRUE(counted_again);
    }
    if (crash_after == steps) {
      EXPECT_FALSE(counted_again);
    }
  }
}

}  // namespace
}  // namespace vigil
