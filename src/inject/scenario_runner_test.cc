// Tests of the scenario runner against an in-memory target that records what it was asked to
// do: steps at their times, a failing step, cancellation, and a cancel that arrives while a step
// is being applied (the target calls back into the runner, which holds no lock while calling it).
#include "inject/scenario_runner.h"

#include <functional>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);
const Principal kRoot{.transport = "unix", .uid = 0, .pid = 42, .description = "uid 0 (root)"};

class RecordingTarget : public ScenarioTarget {
 public:
  absl::StatusOr<InjectionRecord> InjectField(const FieldInjectionRequest& request,
                                              const Principal& principal) override {
    calls.push_back(
        fmt::format("field {} on GPU {} by {}", request.field, request.gpu, principal.description));
    if (during_inject) during_inject();
    if (fail_fields) return absl::InvalidArgumentError("no such field here");
    InjectionRecord record{.id = "inj-" + std::to_string(++next),
                           .gpu = request.gpu,
                           .field = request.field,
                           .scenario_id = request.scenario_id};
    active.push_back(record);
    return record;
  }
  absl::StatusOr<InjectionRecord> InjectXid(const XidInjectionRequest& request,
                                            const Principal&) override {
    calls.push_back(fmt::format("xid {} on GPU {}", request.xid, request.gpu));
    return InjectionRecord{.id = "inj-" + std::to_string(++next),
                           .xid = request.xid,
                           .scenario_id = request.scenario_id};
  }
  std::vector<std::string> ClearScenarioInjections(const std::string& scenario_id, const Principal&,
                                                   std::string_view why) override {
    std::vector<std::string> ids;
    std::erase_if(active, [&](const InjectionRecord& record) {
      if (record.scenario_id != scenario_id) return false;
      ids.push_back(record.id);
      return true;
    });
    calls.push_back(fmt::format("clear {} ({}): {}", scenario_id, why, ids.size()));
    return ids;
  }
  std::vector<std::string> ClearFieldInjection(uint32_t gpu, FieldId field, const Principal&,
                                               std::string_view) override {
    calls.push_back(fmt::format("clear field {} on GPU {}", field, gpu));
    return {};
  }
  absl::StatusOr<InjectionRecord> InjectPort(const PortInjectionRequest& request,
                                             const Principal&) override {
    calls.push_back(fmt::format("port {} {} {}{} for {}", request.port, request.field,
                                request.value.has_value() ? "= " : "+= ",
                                request.value.has_value() ? *request.value : *request.add,
                                absl::FormatDuration(request.duration)));
    InjectionRecord record{.id = "inj-" + std::to_string(++next),
                           .nic_port = request.port,
                           .port_field = request.field,
                           .scenario_id = request.scenario_id};
    active.push_back(record);
    return record;
  }
  std::vector<std::string> ClearPortInjection(const std::string& port, const std::string& field,
                                              const Principal&, std::string_view) override {
    calls.push_back(fmt::format("clear port {} {}", port, field));
    return {};
  }
  void AuditScenario(Audit what, const Principal&, std::string message) override {
    if (what != Audit::kStep) audits.push_back(std::move(message));
  }

  std::vector<std::string> calls, audits;
  std::vector<InjectionRecord> active;
  std::function<void()> during_inject;
  bool fail_fields = false;
  int next = 0;
};

constexpr char kScenario[] = R"(name: drill
steps:
  - at: 0s
    inject: {gpu: 1, field: DCGM_FI_DEV_GPU_TEMP, value: 95, for: 30s}
  - at: 5s
    xid: {gpu: 1, xid: 79}
  - at: 10s
    clear: all
)";

TEST(ScenarioRunnerTest, StepsRunAtTheirTimesThenTheScenarioIsDone) {
  RecordingTarget target;
  ScenarioRunner runner(&target, {.gpu_count = 2});
  auto run = runner.Start(kScenario, "drill.yaml", kRoot, kT0);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->id, "scn-1");
  runner.Advance(kT0);
  EXPECT_THAT(target.calls,
              ElementsAre("field 150 on GPU 1 by scenario scn-1 (started by uid 0 (root))"));
  runner.Advance(kT0 + absl::Seconds(7));
  EXPECT_EQ(target.calls.back(), "xid 79 on GPU 1");
  EXPECT_EQ(runner.List()[0].steps_done, 2u);
  EXPECT_EQ(runner.List()[0].state, ScenarioRun::State::kRunning);
  runner.Advance(kT0 + absl::Seconds(10));
  EXPECT_EQ(target.calls.back(), "clear scn-1 (scenario step): 1");
  EXPECT_EQ(runner.List()[0].state, ScenarioRun::State::kDone);
  EXPECT_THAT(target.audits, ElementsAre(HasSubstr("scn-1 'drill' started: 3 step(s)"),
                                         "scn-1 'drill' done: 3 step(s) applied"));
}

TEST(ScenarioRunnerTest, APortFlapsByItsStepsAndEachIsCheckedBeforeTheStart) {
  RecordingTarget target;
  std::vector<std::string> checked;
  ScenarioLimits limits{.gpu_count = 2, .check_port = [&](const PortInjectionRequest& request) {
                          checked.push_back(request.port + " " + request.field);
                          return request.port == "mlx5_1/1"
                                     ? absl::OkStatus()
                                     : absl::NotFoundError("the node has no NIC port " +
                                                           request.port +
                                                           ": its ports are mlx5_1/1");
                        }};
  ScenarioRunner runner(&target, limits);
  auto refused = runner.Start(R"(steps:
  - at: 0s
    inject: {port: mlx5_1/1, field: state, value: 1, for: 5s}
  - at: 10s
    inject: {port: mlx5_9/1, field: state, value: 1}
)",
                              "flap.yaml", kRoot, kT0);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("flap.yaml:5: steps[1].inject: the node has no NIC port mlx5_9/1"));
  EXPECT_TRUE(target.calls.empty());  // nothing applied from a scenario with a bad step

  auto run = runner.Start(R"(name: flap
steps:
  - at: 0s
    inject: {port: mlx5_1/1, field: state, value: 1, for: 5s}
  - at: 5s
    inject: {port: mlx5_1/1, field: link_downed, add: 1, for: 1m}
  - at: 10s
    inject: {port: mlx5_1/1, field: state, value: 1, for: 5s}
  - at: 12s
    clear: {port: mlx5_1/1, field: state}
)",
                          "flap.yaml", kRoot, kT0);
  ASSERT_TRUE(run.ok()) << run.status();
  runner.Advance(kT0 + absl::Seconds(5));
  runner.Advance(kT0 + absl::Seconds(12));
  EXPECT_THAT(target.calls,
              ElementsAre("port mlx5_1/1 state = 1 for 5s", "port mlx5_1/1 link_downed += 1 for 1m",
                          "port mlx5_1/1 state = 1 for 5s", "clear port mlx5_1/1 state"));
  EXPECT_EQ(runner.List().back().state, ScenarioRun::State::kDone);
}

TEST(ScenarioRunnerTest, AStepThatCannotApplyFailsTheScenarioAndClearsIt) {
  RecordingTarget target;
  target.fail_fields = true;
  ScenarioRunner runner(&target, {.gpu_count = 2});
  ASSERT_TRUE(runner.Start(kScenario, "drill.yaml", kRoot, kT0).ok());
  runner.Advance(kT0 + absl::Seconds(60));  // every step due at once: only the first is tried
  EXPECT_EQ(target.calls.size(), 2u);
  EXPECT_EQ(target.calls[1],
            "clear scn-1 (scn-1 failed: step at +0 (line 3): no such field here): 0");
  const ScenarioRun run = runner.List()[0];
  EXPECT_EQ(run.state, ScenarioRun::State::kFailed);
  EXPECT_EQ(run.steps_done, 0u);
  EXPECT_THAT(run.error, HasSubstr("line 3"));
  EXPECT_THAT(target.audits.back(), HasSubstr("failed: step at +0 (line 3)"));
  runner.Advance(kT0 + absl::Seconds(120));
  EXPECT_EQ(target.calls.size(), 2u);  // a failed scenario does nothing more
}

TEST(ScenarioRunnerTest, CancelClearsItsInjectionsAndUnknownIdsAreNotFound) {
  RecordingTarget target;
  ScenarioRunner runner(&target, {.gpu_count = 2});
  ASSERT_TRUE(runner.Start(kScenario, "drill.yaml", kRoot, kT0).ok());
  runner.Advance(kT0);
  auto cancelled = runner.Cancel("scn-1", false, kRoot);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_THAT(*cancelled, ElementsAre("scn-1", "inj-1"));
  EXPECT_EQ(runner.List()[0].state, ScenarioRun::State::kCancelled);
  EXPECT_THAT(target.audits.back(), HasSubstr("cancelled after 1 of 3 step(s)"));
  EXPECT_EQ(runner.Cancel("scn-1", false, kRoot).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(runner.Cancel("", true, kRoot).ok());  // nothing running: fine with --all
  runner.Advance(kT0 + absl::Seconds(60));
  EXPECT_EQ(target.calls.back(), "clear scn-1 (scn-1 cancelled): 1");
}

TEST(ScenarioRunnerTest, ACancelWhileAStepAppliesTakesItsInjectionBack) {
  RecordingTarget target;
  ScenarioRunner runner(&target, {.gpu_count = 2});
  ASSERT_TRUE(runner.Start(kScenario, "drill.yaml", kRoot, kT0).ok());
  // The operator's clear arrives on another thread while the tick applies the first step; here
  // it runs inside the step, which would deadlock if the runner held its lock.
  target.during_inject = [&] { EXPECT_TRUE(runner.Cancel("scn-1", false, kRoot).ok()); };
  runner.Advance(kT0);
  EXPECT_TRUE(target.active.empty()) << "the step's injection outlived its cancelled scenario";
  EXPECT_EQ(runner.List()[0].state, ScenarioRun::State::kCancelled);
}

TEST(ScenarioRunnerTest, KeepsRunningScenariosAndTheMostRecentEndedOnes) {
  RecordingTarget target;
  ScenarioRunner runner(&target, {.gpu_count = 2});
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(runner.Start(kScenario, "drill.yaml", kRoot, kT0).ok());
  }
  ASSERT_TRUE(runner
                  .Start("name: later\nsteps:\n  - at: 1h\n    xid: {gpu: 0, xid: 13}\n",
                         "later.yaml", kRoot, kT0)
                  .ok());
  runner.Advance(kT0 + absl::Seconds(10));
  const std::vector<ScenarioRun> runs = runner.List();
  EXPECT_EQ(runs.size(), ScenarioRunner::kEndedKept + 1);
  EXPECT_EQ(runs.back().state, ScenarioRun::State::kRunning);
  EXPECT_EQ(runs.front().id, "scn-11");
}

}  // namespace
}  // namespace vigil
