// Tests of the mapping from the health check's view to the GpuProblem node condition.
#include "healthcheck/condition.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

v1::GpuHealth* AddGpu(v1::HealthVerdict* verdict, uint32_t index, v1::HealthStatus status) {
  v1::GpuHealth* gpu = verdict->add_gpus();
  gpu->set_gpu(index);
  gpu->set_uuid("GPU-" + std::to_string(index));
  gpu->set_status(status);
  return gpu;
}

v1::HealthIncident* AddIncident(v1::GpuHealth* gpu, const std::string& system,
                                v1::HealthStatus status, const std::string& code) {
  v1::SystemHealth* health = gpu->add_systems();
  health->set_system(system);
  health->set_status(status);
  v1::HealthIncident* incident = health->add_incidents();
  incident->set_system(system);
  incident->set_status(status);
  incident->set_code(code);
  incident->set_message("what happened");
  incident->set_action("what to do");
  return incident;
}

// A fresh view of 4 GPUs, all passing, received at kStart + 1 s.
HealthView FreshView() {
  HealthView view;
  view.node_name = "n1";
  view.engine_address = "unix:///run/vigil/vigil.sock";
  view.connected = true;
  view.engine_instance_id = "abc";
  view.engine_node = "n1";
  view.have_verdict = true;
  view.received = kStart + absl::Seconds(1);
  view.verdict.set_seq(42);
  view.verdict.set_overall(v1::HEALTH_STATUS_PASS);
  for (uint32_t i = 0; i < 4; ++i) AddGpu(&view.verdict, i, v1::HEALTH_STATUS_PASS);
  return view;
}

std::optional<DesiredCondition> At(const HealthView& view, absl::Duration after_start) {
  return ConditionFromView(view, kStart + after_start, kStart, absl::Seconds(30));
}

TEST(ConditionTest, FreshVerdictsMapToTrueFalseAndUnknown) {
  HealthView view = FreshView();
  auto pass = At(view, absl::Seconds(2));
  ASSERT_TRUE(pass.has_value());
  EXPECT_EQ(pass->status, "False");
  EXPECT_EQ(pass->reason, "GpusHealthy");
  EXPECT_EQ(pass->message, "engine abc seq 42: all 4 GPUs pass");

  view.verdict.set_overall(v1::HEALTH_STATUS_FAIL);
  v1::GpuHealth* gpu = view.verdict.mutable_gpus(3);
  gpu->set_status(v1::HEALTH_STATUS_FAIL);
  AddIncident(gpu, "driver", v1::HEALTH_STATUS_FAIL, "DCGM_FR_FALLEN_OFF_BUS")->set_injected(true);
  AddIncident(gpu, "thermal", v1::HEALTH_STATUS_WARN, "DCGM_FR_CLOCKS_EVENT_THERMAL");
  auto fail = At(view, absl::Seconds(2));
  ASSERT_TRUE(fail.has_value());
  EXPECT_EQ(fail->status, "True");
  EXPECT_EQ(fail->reason, "GpuFailed");
  // Injected by a drill that does not allow actions: the condition says so, and nothing acts.
  EXPECT_FALSE(fail->actionable);
  EXPECT_EQ(fail->message,
            "engine abc seq 42: (no automatic action: every failure is a drill's, injected "
            "without --allow-actions); GPU 3 (GPU-3) FAIL: driver DCGM_FR_FALLEN_OFF_BUS: what "
            "happened (action: what to do) [injected]");
  const std::string dry_run = fail->identity;
  gpu->mutable_systems(0)->mutable_incidents(0)->set_actions_allowed(true);
  auto allowed = At(view, absl::Seconds(2));
  EXPECT_TRUE(allowed->actionable);
  EXPECT_EQ(allowed->message,
            "engine abc seq 42: GPU 3 (GPU-3) FAIL: driver DCGM_FR_FALLEN_OFF_BUS: what happened "
            "(action: what to do) [injected]");
  EXPECT_NE(allowed->identity, dry_run) << "allowing actions is worth a write";

  view.verdict.set_overall(v1::HEALTH_STATUS_WARN);
  gpu->set_status(v1::HEALTH_STATUS_WARN);
  auto warn = At(view, absl::Seconds(2));
  EXPECT_EQ(warn->status, "False");
  EXPECT_EQ(warn->reason, "GpuWarning");
  EXPECT_THAT(warn->message, HasSubstr("DCGM_FR_CLOCKS_EVENT_THERMAL"));

  view.verdict.set_overall(v1::HEALTH_STATUS_UNKNOWN);
  gpu = view.verdict.mutable_gpus(1);
  gpu->set_status(v1::HEALTH_STATUS_UNKNOWN);
  v1::SystemHealth* pcie = gpu->add_systems();
  pcie->set_system("pcie");
  pcie->set_status(v1::HEALTH_STATUS_UNKNOWN);
  pcie->set_unknown_reason("no PCIe replay counter for 90 s");
  auto unknown = At(view, absl::Seconds(2));
  EXPECT_EQ(unknown->status, "Unknown");
  EXPECT_EQ(unknown->reason, "GpuHealthUnknown");
  EXPECT_THAT(unknown->message, HasSubstr("GPU 1 (GPU-1) UNKNOWN in pcie (no PCIe replay"));
}

// A fatal NVSwitch error (the node's nvswitch system) is a GPU problem of the whole node: the
// condition turns True and says so, while every GPU passes.
TEST(ConditionTest, TheNodesNvswitchSystemIsPartOfTheCondition) {
  HealthView view = FreshView();
  v1::SystemHealth* nvswitch = view.verdict.add_node_systems();
  nvswitch->set_system("nvswitch");
  nvswitch->set_status(v1::HEALTH_STATUS_PASS);
  auto pass = At(view, absl::Seconds(2));
  EXPECT_EQ(pass->reason, "GpusHealthy");
  EXPECT_THAT(pass->message, HasSubstr("and the node's NVSwitches"));
  HealthView two = view;
  two.verdict.add_node_systems()->set_system("nics");
  EXPECT_THAT(At(two, absl::Seconds(2))->message,
              HasSubstr("and the node's NVSwitches and NIC ports"));

  view.verdict.set_overall(v1::HEALTH_STATUS_FAIL);
  nvswitch->set_status(v1::HEALTH_STATUS_FAIL);
  v1::HealthIncident* incident = nvswitch->add_incidents();
  incident->set_system("nvswitch");
  incident->set_status(v1::HEALTH_STATUS_FAIL);
  incident->set_code("DCGM_FR_NVSWITCH_FATAL_ERROR");
  incident->set_message("NVSwitch 1 (00000000:06:00.0): SXid 20034");
  incident->set_action("drain the node");
  incident->set_node(true);
  auto fail = At(view, absl::Seconds(2));
  ASSERT_TRUE(fail.has_value());
  EXPECT_EQ(fail->status, "True");
  EXPECT_EQ(fail->reason, "NvswitchFailed");
  EXPECT_EQ(fail->message,
            "engine abc seq 42: node FAIL: nvswitch DCGM_FR_NVSWITCH_FATAL_ERROR: NVSwitch 1 "
            "(00000000:06:00.0): SXid 20034 (action: drain the node)");
  const std::string identity = fail->identity;
  EXPECT_THAT(identity, HasSubstr("node: nvswitch/DCGM_FR_NVSWITCH_FATAL_ERROR;"));

  // The node's NIC ports (every port down) warning beside it: the reason names the failing one.
  v1::SystemHealth* nics = view.verdict.add_node_systems();
  nics->set_system("nics");
  nics->set_status(v1::HEALTH_STATUS_WARN);
  EXPECT_EQ(At(view, absl::Seconds(2))->reason, "NvswitchFailed");
  nics->set_status(v1::HEALTH_STATUS_FAIL);
  nvswitch->set_status(v1::HEALTH_STATUS_PASS);
  EXPECT_EQ(At(view, absl::Seconds(2))->reason, "NicsFailed");
  nvswitch->set_status(v1::HEALTH_STATUS_FAIL);
  view.verdict.mutable_node_systems()->RemoveLast();

  // A GPU failing too: the reason names the GPUs, the message both.
  v1::GpuHealth* gpu = view.verdict.mutable_gpus(2);
  gpu->set_status(v1::HEALTH_STATUS_FAIL);
  AddIncident(gpu, "driver", v1::HEALTH_STATUS_FAIL, "DCGM_FR_FALLEN_OFF_BUS");
  auto both = At(view, absl::Seconds(2));
  EXPECT_EQ(both->reason, "GpuFailed");
  EXPECT_THAT(both->message, HasSubstr("node FAIL: nvswitch"));
  EXPECT_THAT(both->message, HasSubstr("GPU 2 (GPU-2) FAIL: driver"));
  EXPECT_NE(both->identity, identity);

  // Unreadable kernel log: UNKNOWN with its reason.
  HealthView blind = FreshView();
  blind.verdict.set_overall(v1::HEALTH_STATUS_UNKNOWN);
  v1::SystemHealth* unseen = blind.verdict.add_node_systems();
  unseen->set_system("nvswitch");
  unseen->set_status(v1::HEALTH_STATUS_UNKNOWN);
  unseen->set_unknown_reason("the kernel log cannot be read");
  auto unknown = At(blind, absl::Seconds(2));
  EXPECT_EQ(unknown->status, "Unknown");
  EXPECT_THAT(unknown->message,
              HasSubstr("node UNKNOWN in nvswitch (the kernel log cannot be read)"));
}

// The identity — what makes a node write worth it — follows the failing GPUs, systems and codes,
// not the seq or an incident's running figures.
TEST(ConditionTest, IdentityIgnoresSeqAndFiguresButNotWhatFails) {
  HealthView view = FreshView();
  view.verdict.set_overall(v1::HEALTH_STATUS_WARN);
  v1::GpuHealth* gpu = view.verdict.mutable_gpus(2);
  gpu->set_status(v1::HEALTH_STATUS_WARN);
  v1::HealthIncident* power =
      AddIncident(gpu, "power", v1::HEALTH_STATUS_WARN, "DCGM_FR_CLOCKS_EVENT_POWER");
  power->set_message("throttled for power for 7.9 s of the last 1m");
  const DesiredCondition first = *At(view, absl::Seconds(2));
  view.verdict.set_seq(43);
  power->set_message("throttled for power for 9.1 s of the last 1m");
  const DesiredCondition later = *At(view, absl::Seconds(3));
  EXPECT_NE(later.message, first.message);
  EXPECT_EQ(later.identity, first.identity);
  EXPECT_EQ(first.identity, "GPU-2: power/DCGM_FR_CLOCKS_EVENT_POWER;");
  // Another GPU joins: a change.
  v1::GpuHealth* other = view.verdict.mutable_gpus(0);
  other->set_status(v1::HEALTH_STATUS_WARN);
  AddIncident(other, "thermal", v1::HEALTH_STATUS_WARN, "DCGM_FR_CLOCKS_EVENT_THERMAL");
  EXPECT_NE(At(view, absl::Seconds(4))->identity, first.identity);
}

TEST(ConditionTest, NoFreshVerdictLeavesTheNodeAloneUntilTheGracePeriodEnds) {
  HealthView view = FreshView();
  view.verdict.set_overall(v1::HEALTH_STATUS_FAIL);
  view.connected = false;
  view.problem = "the engine at unix:///run/vigil/vigil.sock is unreachable";
  EXPECT_FALSE(At(view, absl::Seconds(30)).has_value()) << "29 s after the last verdict";
  auto unknown = At(view, absl::Seconds(31));
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->status, "Unknown");
  EXPECT_EQ(unknown->reason, "EngineUnreachable");
  EXPECT_EQ(unknown->message,
            "the engine at unix:///run/vigil/vigil.sock is unreachable (last verdict FAIL at seq "
            "42, 30s ago)");

  HealthView starting;
  starting.engine_address = "unix:///run/vigil/vigil.sock";
  starting.problem = "not connected to the engine yet";
  EXPECT_FALSE(At(starting, absl::Seconds(29)).has_value());
  auto never = At(starting, absl::Seconds(30));
  ASSERT_TRUE(never.has_value());
  EXPECT_EQ(never->reason, "EngineUnreachable");
  EXPECT_THAT(never->message, HasSubstr("(no verdict yet)"));

  HealthView other = FreshView();
  other.node_mismatch = true;
  other.have_verdict = false;
  other.problem = "the engine belongs to node 'n2'";
  EXPECT_EQ(At(other, absl::Minutes(1))->reason, "EngineOfAnotherNode");

  HealthView stale = FreshView();  // connected, but the engine stopped ticking
  EXPECT_EQ(At(stale, absl::Minutes(1))->reason, "VerdictStale");
}

TEST(ConditionTest, LongMessagesAreCutAndSayHowManyWereLeftOut) {
  HealthView view = FreshView();
  view.verdict.set_overall(v1::HEALTH_STATUS_FAIL);
  for (uint32_t i = 4; i < 64; ++i) {
    AddIncident(AddGpu(&view.verdict, i, v1::HEALTH_STATUS_FAIL), "memory", v1::HEALTH_STATUS_FAIL,
                "DCGM_FR_VOLATILE_DBE_DETECTED");
  }
  auto fail = At(view, absl::Seconds(2));
  ASSERT_TRUE(fail.has_value());
  EXPECT_LE(fail->message.size(), kMaxConditionMessage);
  EXPECT_THAT(fail->message, HasSubstr("GPU 4 (GPU-4) FAIL: memory"));
  EXPECT_THAT(fail->message, ::testing::MatchesRegex(".*; and [0-9]+ more"));
}

}  // namespace
}  // namespace vigil
