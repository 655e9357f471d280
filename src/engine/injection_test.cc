// Tests for the injection table and its use by the engine, on a fake clock: overrides and expiry,
// counter monotonicity, validation, XIDs, events and scenarios.
#include "inject/injection.h"

#include "backend/sim_backend.h"
#include "engine/engine.h"
#include "engine/test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

const Principal& kRoot = kTestRoot;

class InjectionEngineTest : public SimEngineTest {
 protected:
  void SetUp() override { StartEngine(1); }

  FieldValue Latest(uint32_t gpu, FieldId field) {
    return engine_->Latest()->at(gpu, *engine_->layout().IndexOf(field)).value;
  }
};

TEST_F(InjectionEngineTest, ValueReplacesTheReadingUntilItExpires) {
  auto record = engine_->InjectField(
      {.gpu = 1, .field = fid::kPowerUsage, .value = 900, .duration = absl::Seconds(5)}, kRoot);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->id, "inj-1");
  EXPECT_FALSE(Latest(1, fid::kPowerUsage).injected);  // from the next tick
  Tick();
  FieldValue injected = Latest(1, fid::kPowerUsage);
  EXPECT_TRUE(injected.injected);
  EXPECT_EQ(injected.as_double(), 900);
  EXPECT_FALSE(Latest(0, fid::kPowerUsage).injected);  // the other GPU keeps its real reading
  Tick(3);
  EXPECT_TRUE(Latest(1, fid::kPowerUsage).injected);
  Tick();  // 5 s after the injection: it ends, the real reading is back in the same tick
  const FieldValue real = Latest(1, fid::kPowerUsage);
  EXPECT_FALSE(real.injected);
  EXPECT_NE(real.as_double(), 900);
  // History keeps both, with their flags.
  auto history = engine_->History({.gpus = {1}, .fields = {fid::kPowerUsage}});
  int flagged = 0;
  for (const auto& sample : (*history)[0].samples) flagged += sample.value.injected;
  EXPECT_EQ(flagged, 4);
  EXPECT_THAT(events_->Kinds(), ::testing::ElementsAre("INJECTION_STARTED", "INJECTION_EXPIRED"));
  EXPECT_EQ(events_->events[0]->principal->description, "uid 0 (root)");
}

TEST_F(InjectionEngineTest, SlowFieldsShowTheInjectionAtTheNextTick) {
  // ECC counters are sampled every 30 s; an injection must not wait for the next sample.
  ASSERT_TRUE(
      engine_->InjectField({.gpu = 0, .field = fid::kEccDbeVolTotal, .add = 2}, kRoot).ok());
  Tick();
  EXPECT_EQ(Latest(0, fid::kEccDbeVolTotal), [] {
    FieldValue v = FieldValue::Int(2);
    v.injected = true;
    return v;
  }());
}

TEST_F(InjectionEngineTest, CountersStayMonotonicThroughAddAndClear) {
  const FieldId energy = fid::kTotalEnergy;
  const int64_t before = Latest(0, energy).as_int();
  auto add = engine_->InjectField(
      {.gpu = 0, .field = energy, .add = 3'600'000'000, .duration = absl::Seconds(30)}, kRoot);
  ASSERT_TRUE(add.ok()) << add.status();
  int64_t previous = before;
  for (int i = 0; i < 10; ++i) {
    Tick();
    const FieldValue value = Latest(0, energy);
    EXPECT_TRUE(value.injected);
    EXPECT_GE(value.as_int(), previous);
    previous = value.as_int();
  }
  // Still following the real counter underneath: more than the offset above where it started.
  EXPECT_GT(previous, before + 3'600'000'000);
  ASSERT_TRUE(engine_->Clear(add->id, false, kRoot).ok());
  // After the clear the counter holds (flagged) until the real one catches up; never goes back.
  for (int i = 0; i < 5; ++i) {
    Tick();
    const FieldValue value = Latest(0, energy);
    EXPECT_GE(value.as_int(), previous);
    EXPECT_TRUE(value.injected);
    previous = value.as_int();
  }
}

TEST_F(InjectionEngineTest, RefusesBadRequestsWithAClearMessage) {
  struct Case {
    FieldInjectionRequest request;
    const char* message;
  };
  const int64_t real_replays = Latest(0, fid::kPcieReplayCounter).as_int();
  const Case cases[] = {
      {{.gpu = 5, .field = 150, .value = 1}, "GPU 5 does not exist"},
      {{.gpu = 0, .field = 4242, .value = 1}, "unknown field ID 4242"},
      {{.gpu = 0, .field = fid::kUuid, .value = 1}, "string field"},
      {{.gpu = 0, .field = 150, .value = 80.5}, "takes an integer"},
      {{.gpu = 0, .field = 150, .add = 5}, "not a cumulative counter"},
      {{.gpu = 0, .field = fid::kPcieReplayCounter, .add = -1}, "positive"},
      {{.gpu = 0, .field = fid::kPcieReplayCounter, .value = double(real_replays - 1)},
       "go backwards"},
      {{.gpu = 0, .field = 150, .value = 1, .duration = -absl::Seconds(1)}, "negative"},
      {{.gpu = 0, .field = 150, .value = 1, .duration = absl::Hours(2)}, "maximum injection"},
      {{.gpu = 0, .field = 150}, "exactly one"},
      {{.gpu = 0, .field = fid::kXidErrors, .value = 79}, "inject an XID instead"},
  };
  for (const Case& c : cases) {
    auto record = engine_->InjectField(c.request, kRoot);
    EXPECT_EQ(record.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(record.status().message()), HasSubstr(c.message));
  }
  EXPECT_TRUE(engine_->Injections().empty());
  EXPECT_TRUE(events_->events.empty());
}

TEST_F(InjectionEngineTest, NewInjectionSupersedesTheOldOne) {
  ASSERT_TRUE(engine_->InjectField({.gpu = 0, .field = 150, .value = 95}, kRoot).ok());
  ASSERT_TRUE(engine_->InjectField({.gpu = 0, .field = 150, .value = 99}, kRoot).ok());
  ASSERT_EQ(engine_->Injections().size(), 1u);
  EXPECT_EQ(engine_->Injections()[0].id, "inj-2");
  Tick();
  EXPECT_EQ(Latest(0, 150).as_int(), 99);
  EXPECT_THAT(events_->Kinds(), ::testing::ElementsAre("INJECTION_STARTED", "INJECTION_CLEARED",
                                                       "INJECTION_STARTED"));
}

TEST_F(InjectionEngineTest, InjectedXidIsTheSameEventAsARealOneButFlagged) {
  sim_->RaiseXid(0, 13, clock_.Now());
  ASSERT_TRUE(engine_->InjectXid({.gpu = 1, .xid = 79}, kRoot).ok());
  EXPECT_EQ(engine_->InjectXid({.gpu = 1, .xid = 0}, kRoot).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->InjectXid({.gpu = 7, .xid = 79}, kRoot).status().code(),
            absl::StatusCode::kInvalidArgument);
  Tick();
  EXPECT_EQ(Latest(0, fid::kXidErrors), FieldValue::Int(13));
  FieldValue injected = FieldValue::Int(79);
  injected.injected = true;
  EXPECT_EQ(Latest(1, fid::kXidErrors), injected);
  std::vector<EventPtr> xids;
  for (const EventPtr& event : events_->events) {
    if (event->kind == EventKind::kXid) xids.push_back(event);
  }
  ASSERT_EQ(xids.size(), 2u);
  EXPECT_FALSE(xids[0]->injected);
  EXPECT_TRUE(xids[1]->injected);
  EXPECT_EQ(xids[1]->xid, 79u);
  EXPECT_EQ(xids[1]->gpu, 1);
  EXPECT_EQ(xids[1]->principal->uid, 0);
}

TEST(MigXidTest, AnXidInAGpuInstanceNamesItInTheIncidentAndTheEvent) {
  FakeClock clock;
  auto sim = SimBackend::Create(
      {.gpu_count = 2, .seed = 3, .mig = {{.gpu = 0, .profiles = {"1g.10gb", "2g.20gb"}}}});
  ASSERT_TRUE(sim.ok()) << sim.status();
  auto engine = Engine::Create({.node_name = "n1", .clock = &clock}, std::move(*sim));
  ASSERT_TRUE(engine.ok());
  auto events = std::make_shared<RecordingEvents>();
  ASSERT_TRUE((*engine)->WatchEvents(events, 0).ok());
  const std::string mig_uuid = (*engine)->gpus()[0].mig.instances[1].uuid;  // the 1g.10gb at 2
  ASSERT_TRUE((*engine)->InjectXid({.gpu = 0, .xid = 94, .gpu_instance = 2}, kTestRoot).ok());
  clock.Advance(absl::Seconds(1));
  (*engine)->RunTick();
  EXPECT_THAT(events->Messages(EventKind::kXid)[0],
              HasSubstr("XID 94 in GPU instance 2 (1g.10gb, " + mig_uuid + ")"));
  const auto verdict = (*engine)->Health();
  std::string incident;
  for (const SystemHealth& system : verdict->gpus[0].systems) {
    for (const Incident& found : system.incidents) incident += found.message;
  }
  EXPECT_THAT(incident, HasSubstr("XID 94 in GPU instance 2 (1g.10gb"));
  EXPECT_NE(verdict->gpus[0].status, HealthStatus::kPass) << "the GPU's verdict";
  // An instance the GPU does not have, or a GPU not in MIG mode, is refused.
  EXPECT_THAT(
      (*engine)->InjectXid({.gpu = 0, .xid = 94, .gpu_instance = 7}, kTestRoot).status().message(),
      HasSubstr("GPU 0 has no GPU instance 7: its instances are 1, 2"));
  EXPECT_THAT(
      (*engine)->InjectXid({.gpu = 1, .xid = 94, .gpu_instance = 1}, kTestRoot).status().message(),
      HasSubstr("GPU 1 is not in MIG mode"));
}

TEST_F(InjectionEngineTest, ClearAllAndUnknownIds) {
  ASSERT_TRUE(engine_->InjectField({.gpu = 0, .field = 150, .value = 95}, kRoot).ok());
  ASSERT_TRUE(engine_->InjectField({.gpu = 1, .field = 155, .value = 650}, kRoot).ok());
  EXPECT_EQ(engine_->Clear("inj-99", false, kRoot).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Clear("scn-9", false, kRoot).status().code(), absl::StatusCode::kNotFound);
  auto cleared = engine_->Clear("", true, kRoot);
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(cleared->size(), 2u);
  EXPECT_TRUE(engine_->Injections().empty());
  Tick();
  EXPECT_FALSE(Latest(0, 150).injected);
}

TEST_F(InjectionEngineTest, ScenarioRunsOnTheEnginesTicksAndCanBeCancelled) {
  const char* yaml = R"(
name: drill
steps:
  - at: 0s
    inject: {gpu: 1, field: DCGM_FI_DEV_POWER_USAGE, value: 950, for: 20s}
  - at: 2s
    xid: {gpu: 1, xid: 79}
  - at: 4s
    clear: all
  - at: 10s
    inject: {gpu: 0, field: DCGM_FI_DEV_GPU_TEMP, value: 96}
)";
  auto scenario = engine_->RunScenario(yaml, "drill.yaml", kRoot);
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  EXPECT_EQ(scenario->id, "scn-1");
  Tick();
  EXPECT_EQ(Latest(1, fid::kPowerUsage).as_double(), 950);
  Tick(2);
  EXPECT_EQ(Latest(1, fid::kXidErrors).as_int(), 79);
  Tick(2);  // +4 s: cleared
  EXPECT_FALSE(Latest(1, fid::kPowerUsage).injected);
  EXPECT_EQ(engine_->Scenarios()[0].steps_done, 3u);
  auto cancelled = engine_->Clear("scn-1", false, kRoot);
  ASSERT_TRUE(cancelled.ok());
  Tick(10);
  EXPECT_FALSE(Latest(0, 150).injected);  // the step at +10 s never ran
  EXPECT_EQ(engine_->Scenarios()[0].state, ScenarioRun::State::kCancelled);
}

TEST_F(InjectionEngineTest, ScenarioThatCannotApplyAStepFailsAndCleansUp) {
  const int64_t replays = Latest(0, fid::kPcieReplayCounter).as_int();
  const std::string yaml =
      "steps:\n"
      "  - at: 0s\n"
      "    inject: {gpu: 0, field: DCGM_FI_DEV_GPU_TEMP, value: 90}\n"
      "  - at: 1s\n"
      "    inject: {gpu: 0, field: DCGM_FI_DEV_PCIE_REPLAY_COUNTER, value: " +
      std::to_string(replays - 1) + "}\n";
  ASSERT_TRUE(engine_->RunScenario(yaml, "s.yaml", kRoot).ok());
  Tick(3);
  const ScenarioRun state = engine_->Scenarios()[0];
  EXPECT_EQ(state.state, ScenarioRun::State::kFailed);
  EXPECT_THAT(state.error, HasSubstr("line 4"));
  EXPECT_THAT(state.error, HasSubstr("go backwards"));
  EXPECT_TRUE(engine_->Injections().empty());
}

TEST_F(InjectionEngineTest, BadScenarioChangesNothing) {
  auto scenario = engine_->RunScenario(
      "steps:\n  - at: 0s\n    inject: {gpu: 0, field: DCGM_FI_DEV_GPU_TEMP, value: 90}\n"
      "  - at: 1s\n    xid: {gpu: 9, xid: 79}\n",
      "bad.yaml", kRoot);
  EXPECT_THAT(std::string(scenario.status().message()), HasSubstr("bad.yaml:5"));
  Tick(2);
  EXPECT_TRUE(engine_->Scenarios().empty());
  EXPECT_FALSE(Latest(0, 150).injected);
  EXPECT_TRUE(events_->events.empty());
}

TEST(InjectionTableTest, ExpiresOnTheClockAndForcesAReadAfterwards) {
  std::vector<const FieldInfo*> fields = {FindField(150), FindField(310)};
  InjectionTable table(std::make_shared<const FieldLayout>(fields), 1, {});
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  std::optional<InjectionRecord> superseded;
  ASSERT_TRUE(
      table
          .AddField({.gpu = 0, .field = 310, .add = 4}, FieldValue::Int(10), kRoot, t0, &superseded)
          .ok());
  std::set<size_t> forced;
  table.ForcedFields(&forced);
  EXPECT_EQ(forced, std::set<size_t>{1});
  EXPECT_TRUE(table.Expire(t0 + absl::Seconds(59)).empty());
  FieldValue value = FieldValue::Int(11);
  table.Apply(0, 1, &value);
  EXPECT_EQ(value.as_int(), 15);
  EXPECT_EQ(table.Expire(t0 + absl::Seconds(60)).size(), 1u);  // the default 60 s
  // The counter holds at 15 until the real one reaches it, then reads are real again.
  value = FieldValue::Int(12);
  table.Apply(0, 1, &value);
  EXPECT_EQ(value.as_int(), 15);
  EXPECT_TRUE(value.injected);
  value = FieldValue::Int(16);
  table.Apply(0, 1, &value);
  EXPECT_EQ(value, FieldValue::Int(16));
  forced.clear();
  table.ForcedFields(&forced);
  forced.clear();
  table.ForcedFields(&forced);
  EXPECT_TRUE(forced.empty());
}

}  // namespace
}  // namespace vigil
