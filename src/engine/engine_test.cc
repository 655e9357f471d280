// Tests for the Engine on the simulated backend with a fake clock: ticks, schedule, caches,
// failures, events, fan-out and request validation. No sleeps: the test drives every tick.
#include "engine/engine.h"

#include <thread>

#include "backend/sim_backend.h"
#include "engine/test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "health/incident_store.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

class RecordingListener : public TickListener {
 public:
  void OnMessage(const SnapshotPtr& snapshot) override { seqs.push_back(snapshot->seq); }
  void OnStop(const absl::Status& status) override { stop_status = status; }
  std::vector<uint64_t> seqs;
  absl::Status stop_status;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(EngineConfig{}); }

  void Make(EngineConfig config) {
    auto sim = SimBackend::Create({.gpu_count = 4, .seed = 9});
    ASSERT_TRUE(sim.ok());
    sim_ = sim->get();
    auto engine = Engine::Create({.node_name = "n1", .config = std::move(config), .clock = &clock_},
                                 std::move(*sim));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }

  void Tick(int count = 1) {
    for (int i = 0; i < count; ++i) {
      clock_.Advance(absl::Seconds(1));
      engine_->RunTick();
    }
  }

  const LatestValue& Latest(uint32_t gpu, FieldId field) {
    snapshot_ = engine_->Latest();
    return snapshot_->at(gpu, *engine_->layout().IndexOf(field));
  }

  FakeClock clock_;
  SimBackend* sim_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<const Snapshot> snapshot_;
};

TEST_F(EngineTest, IdentityAndEmptySnapshotBeforeFirstTick) {
  EXPECT_EQ(engine_->identity().node_name, "n1");
  EXPECT_EQ(engine_->identity().backend, "sim");
  EXPECT_EQ(engine_->identity().instance_id.size(), 32u);
  EXPECT_EQ(engine_->gpus().size(), 4u);
  EXPECT_EQ(engine_->Latest()->seq, 0u);
  EXPECT_EQ(Latest(0, 150).value.status, ValueStatus::kNoData);
}

TEST_F(EngineTest, InstanceIdsDifferPerStart) {
  const std::string first = engine_->identity().instance_id;
  Make(EngineConfig{});
  EXPECT_NE(engine_->identity().instance_id, first);
}

TEST_F(EngineTest, TicksHaveIncreasingSeqAndEveryFieldAtFirstTick) {
  Tick();
  EXPECT_EQ(engine_->Latest()->seq, 1u);
  for (uint32_t gpu = 0; gpu < 4; ++gpu) {
    EXPECT_TRUE(Latest(gpu, 150).value.ok());
    EXPECT_EQ(Latest(gpu, 150).sample_seq, 1u);
    EXPECT_EQ(Latest(gpu, 54).value, FieldValue::String(engine_->gpus()[gpu].uuid));
    EXPECT_EQ(Latest(gpu, 191).value.status, ValueStatus::kNotSupported);
    EXPECT_EQ(Latest(gpu, 230).value, FieldValue::Int(0));
  }
  Tick(4);
  EXPECT_EQ(engine_->Latest()->seq, 5u);
  EXPECT_EQ(engine_->Latest()->time, clock_.Now());
}

TEST_F(EngineTest, FieldsAreSampledOnTheirOwnIntervals) {
  Tick();
  Tick(5);
  EXPECT_EQ(Latest(0, 150).sample_seq, 6u);  // 1 s field: every tick
  EXPECT_EQ(Latest(0, 310).sample_seq, 1u);  // 30 s ECC counter: not yet again
  Tick(25);
  EXPECT_EQ(Latest(0, 310).sample_seq, 31u);
}

TEST_F(EngineTest, ConfiguredIntervalOverridesTheCatalogue) {
  EngineConfig config;
  config.interval_overrides[150] = absl::Seconds(5);
  Make(config);
  Tick(3);
  EXPECT_EQ(Latest(0, 150).sample_seq, 1u);
  EXPECT_EQ(engine_->interval(*engine_->layout().IndexOf(150)), absl::Seconds(5));
}

TEST_F(EngineTest, LostGpuIsMarkedAloneAndRecovers) {
  Tick();
  sim_->SetGpuLost(2, true);
  Tick();
  EXPECT_EQ(Latest(2, 150).value.status, ValueStatus::kGpuLost);
  EXPECT_EQ(Latest(2, 150).sample_seq, 2u);
  EXPECT_TRUE(Latest(1, 150).value.ok());
  EXPECT_TRUE(Latest(3, 150).value.ok());
  EXPECT_EQ(engine_->stats().gpu_read_failures.load(), 1u);
  EXPECT_EQ(engine_->Latest()->gpu_read_status(2), ValueStatus::kGpuLost);
  EXPECT_EQ(engine_->Latest()->gpu_read_status(1), ValueStatus::kOk);
  // Every system of the lost GPU is unknown, even those whose fields were not due this tick.
  const HealthVerdict& health = *engine_->Latest()->health;
  for (const SystemHealth& system : health.gpus[2].systems) {
    if (system.incidents.empty()) {
      EXPECT_EQ(system.status, HealthStatus::kUnknown);
    }
  }
  EXPECT_EQ(health.gpus[2].status, HealthStatus::kFail);
  sim_->SetGpuLost(2, false);
  Tick();
  EXPECT_TRUE(Latest(2, 150).value.ok());
  EXPECT_EQ(engine_->Latest()->gpu_read_status(2), ValueStatus::kOk);
}

TEST_F(EngineTest, XidShowsInField230FromTheNextTick) {
  Tick();
  sim_->RaiseXid(3, 79, clock_.Now());
  EXPECT_EQ(Latest(3, 230).value, FieldValue::Int(0));
  Tick();
  EXPECT_EQ(Latest(3, 230).value, FieldValue::Int(79));
  EXPECT_EQ(Latest(0, 230).value, FieldValue::Int(0));
  EXPECT_EQ(engine_->stats().xid_events.load(), 1u);
}

// NVML reports an XID it cannot name as 999 (nvml.h); the kernel log's line for the same event has
// the real code. One XID under the log's code, whichever comes first; a 999 no line claims is
// applied as 999 once kUnknownXidHold has passed. Before, 999 and the real code counted twice.
TEST_F(EngineTest, NvmlsUnknownXidIsTheKernelLogsXidCountedOnceUnderItsCode) {
  Tick();
  auto xids = [&] {
    std::vector<uint32_t> codes;
    for (const EventPtr& event : engine_->RecentEvents(100)) {
      if (event->kind == EventKind::kXid) codes.push_back(event->xid);
    }
    return codes;
  };
  sim_->RaiseXid(1, kUnknownXid, clock_.Now());  // NVML first
  EXPECT_TRUE(xids().empty()) << "held for the kernel log's line";
  engine_->OnXid({.gpu = 1,
                  .xid = 79,
                  .time = clock_.Now() + absl::Milliseconds(4),
                  .source = XidSource::kKernelLog,
                  .detail = "GPU has fallen off the bus."});
  EXPECT_EQ(xids(), std::vector<uint32_t>{79});
  EXPECT_EQ(engine_->stats().xid_events.load(), 1u);
  EXPECT_EQ(engine_->stats().xid_duplicates.load(), 1u);
  clock_.Advance(kUnknownXidHold + absl::Seconds(1));
  Tick();
  EXPECT_EQ(xids(), std::vector<uint32_t>{79}) << "the 999 is not applied later as well";

  // The kernel log first: NVML's 999 that follows is the same XID.
  clock_.Advance(absl::Seconds(30));
  engine_->OnXid({.gpu = 0, .xid = 13, .time = clock_.Now(), .source = XidSource::kKernelLog});
  sim_->RaiseXid(0, kUnknownXid, clock_.Now() + absl::Milliseconds(2));
  EXPECT_EQ(engine_->stats().xid_events.load(), 2u);
  EXPECT_EQ(engine_->stats().xid_duplicates.load(), 2u);

  // No line for it (or on another GPU): XID 999 at the first tick after the hold, not before.
  clock_.Advance(absl::Seconds(30));
  sim_->RaiseXid(2, kUnknownXid, clock_.Now());
  Tick();
  EXPECT_EQ(engine_->stats().xid_events.load(), 2u);
  clock_.Advance(kUnknownXidHold);
  Tick();
  EXPECT_EQ(engine_->stats().xid_events.load(), 3u);
  EXPECT_EQ(xids().back(), kUnknownXid);
}

// The driver reports one XID through NVML's events and the kernel log: one XID for the engine.
// Two XIDs of the same code, each seen by both, are two; the same source twice is two as well.
TEST_F(EngineTest, AnXidFromBothSourcesIsCountedOnce) {
  Tick();
  auto xid_events = [&] {
    size_t count = 0;
    for (const EventPtr& event : engine_->RecentEvents(100))
      count += event->kind == EventKind::kXid;
    return count;
  };
  sim_->RaiseXid(1, 79, clock_.Now());  // NVML's event
  engine_->OnXid({.gpu = 1,
                  .xid = 79,
                  .time = clock_.Now() + absl::Milliseconds(3),
                  .source = XidSource::kKernelLog,
                  .detail = "GPU has fallen off the bus."});
  EXPECT_EQ(engine_->stats().xid_events.load(), 1u);
  EXPECT_EQ(engine_->stats().xid_duplicates.load(), 1u);
  EXPECT_EQ(xid_events(), 1u);

  // The kernel log first this time, then NVML's event: again one.
  clock_.Advance(absl::Seconds(30));
  engine_->OnXid({.gpu = 1, .xid = 79, .time = clock_.Now(), .source = XidSource::kKernelLog});
  sim_->RaiseXid(1, 79, clock_.Now() + absl::Milliseconds(1));
  EXPECT_EQ(engine_->stats().xid_events.load(), 2u);
  EXPECT_EQ(engine_->stats().xid_duplicates.load(), 2u);

  // Outside the window, or from the same source, or another GPU or code: separate XIDs.
  engine_->OnXid({.gpu = 1,
                  .xid = 79,
                  .time = clock_.Now() + kXidMergeWindow + absl::Seconds(1),
                  .source = XidSource::kKernelLog});
  engine_->OnXid({.gpu = 1,
                  .xid = 79,
                  .time = clock_.Now() + kXidMergeWindow + absl::Seconds(2),
                  .source = XidSource::kKernelLog});
  sim_->RaiseXid(2, 79, clock_.Now());
  sim_->RaiseXid(1, 48, clock_.Now());
  EXPECT_EQ(engine_->stats().xid_events.load(), 6u);
  EXPECT_EQ(engine_->stats().xid_duplicates.load(), 2u);

  // A burst seen by both: NVML reports two XID 13s, then the log reports the same two.
  clock_.Advance(absl::Minutes(5));
  sim_->RaiseXid(0, 13, clock_.Now());
  sim_->RaiseXid(0, 13, clock_.Now() + absl::Milliseconds(1));
  for (int i = 0; i < 2; ++i) {
    engine_->OnXid({.gpu = 0,
                    .xid = 13,
                    .time = clock_.Now() + absl::Milliseconds(2 + i),
                    .source = XidSource::kKernelLog});
  }
  EXPECT_EQ(engine_->stats().xid_events.load(), 8u) << "two XIDs, not three";
  EXPECT_EQ(engine_->stats().xid_duplicates.load(), 4u);
  const std::vector<EventPtr> recent = engine_->RecentEvents(100);
  bool said_kernel_log = false;
  for (const EventPtr& event : recent) {
    said_kernel_log |= event->message.find("(kernel log)") != std::string::npos;
  }
  EXPECT_TRUE(said_kernel_log);
}

// A kernel-log XID counted once however it is read again: NVML reported it first, so its
// incident keeps the log's record; the log read again (a restart's replay) is then a duplicate.
TEST_F(EngineTest, AKernelLogRecordItsIncidentKeepsIsNotCountedAgain) {
  Tick();
  sim_->RaiseXid(1, 79, clock_.Now());  // NVML's event
  const LogPosition record{.source = "/dev/kmsg", .sequence = 7};
  engine_->OnXid({.gpu = 1,
                  .xid = 79,
                  .time = clock_.Now(),
                  .source = XidSource::kKernelLog,
                  .log_position = record});
  Tick();
  clock_.Advance(absl::Hours(1));  // past the merge window: only the kept record matches now
  engine_->OnXid({.gpu = 1,
                  .xid = 79,
                  .time = clock_.Now(),
                  .source = XidSource::kKernelLog,
                  .log_position = record});
  Tick();
  EXPECT_EQ(engine_->stats().xid_events.load(), 1u);
  EXPECT_EQ(engine_->stats().xid_duplicates.load(), 2u);
  for (const SystemHealth& system : engine_->Health()->gpus[1].systems) {
    for (const Incident& incident : system.incidents) {
      if (incident.key == "xid.79") {
        EXPECT_EQ(incident.count, 1u);
      }
    }
  }
}

TEST_F(EngineTest, HistoryServesTicksAndValidatesRequests) {
  const absl::Time start = clock_.Now();
  Tick(10);
  auto history = engine_->History({.gpus = {1}, .fields = {150, 155}, .start = start});
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[0].field, 150u);
  ASSERT_EQ((*history)[0].samples.size(), 10u);
  EXPECT_EQ((*history)[0].samples.back().seq, 10u);
  EXPECT_EQ((*history)[0].samples.back().value, Latest(1, 150).value);

  auto limited = engine_->History({.gpus = {1}, .fields = {150}, .max_samples = 3});
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ((*limited)[0].samples.size(), 3u);
  EXPECT_TRUE((*limited)[0].truncated);

  EXPECT_THAT(engine_->History({.gpus = {4}}).status().message(),
              HasSubstr("GPU 4 does not exist: this engine has 4 GPUs (0-3)"));
  EXPECT_THAT(engine_->History({.fields = {9999}}).status().message(),
              HasSubstr("unknown field ID 9999"));
  EXPECT_THAT(engine_->History({.start = clock_.Now(), .end = start}).status().message(),
              HasSubstr("starts after it ends"));
  EXPECT_THAT(engine_->History({.max_samples = kMaxHistorySamplesPerSeries + 1}).status().message(),
              HasSubstr("over the limit"));
  EXPECT_THAT(
      engine_->History({.gpus = std::vector<uint32_t>(kMaxRequestGpus + 1, 0)}).status().message(),
      HasSubstr("at most"));
}

TEST_F(EngineTest, OversizedHistoryResponsesAreRefused) {
  EngineConfig config;
  config.tick_interval = absl::Milliseconds(10);
  for (const FieldInfo& field : AllFields())
    config.interval_overrides[field.id] = absl::Milliseconds(10);
  Make(config);
  // 4 GPUs x ~74 fields x 1700 ticks > 500k samples.
  for (int i = 0; i < 1700; ++i) {
    clock_.Advance(absl::Milliseconds(10));
    engine_->RunTick();
  }
  auto all = engine_->History({});
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("narrow the time range"));
  EXPECT_TRUE(engine_->History({.gpus = {0}, .fields = {150}}).ok());
}

TEST_F(EngineTest, FanoutDeliversEveryTickThenStops) {
  auto listener = std::make_shared<RecordingListener>();
  ASSERT_TRUE(engine_->SubscribeTicks(listener).ok());
  Tick(3);
  EXPECT_THAT(listener->seqs, ::testing::ElementsAre(1, 2, 3));
  engine_->UnsubscribeTicks(listener.get());
  Tick();
  EXPECT_EQ(listener->seqs.size(), 3u);
  auto second = std::make_shared<RecordingListener>();
  ASSERT_TRUE(engine_->SubscribeTicks(second).ok());
  engine_.reset();
  EXPECT_EQ(second->stop_status.code(), absl::StatusCode::kUnavailable);
}

// A disk whose fsync never returns (a stuck state dir) must not delay a tick or an XID: the FAIL
// is served from memory at once, the engine shows the persistence lag, and the record is
// persisted once the disk answers.
TEST(EnginePersistenceTest, ABlockedFsyncDelaysNeitherTicksNorXids) {
  testing::TempDir dir;
  testing::FaultEnv env;
  FakeClock clock;
  auto sim = SimBackend::Create({.gpu_count = 2, .seed = 3});
  ASSERT_TRUE(sim.ok());
  SimBackend* backend = sim->get();
  auto engine = Engine::Create({.node_name = "n1",
                                .clock = &clock,
                                .state_dir = dir.path(),
                                .boot_id = "boot-a",
                                .env = &env},
                               std::move(*sim));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto tick = [&] {
    clock.Advance(absl::Seconds(1));
    (*engine)->RunTick();
  };
  tick();
  env.BlockSyncs();
  backend->RaiseXid(1, 79, clock.Now());  // the backend's event sink: must not block
  tick();
  ASSERT_TRUE(env.AwaitBlockedSyncs(1));  // the writer is stuck in fsync with the FAIL record
  EXPECT_EQ((*engine)->Health()->gpus[1].status, HealthStatus::kFail);
  // Ticks go on, and more XIDs arrive from another thread, while the fsync hangs.
  std::thread xids([&] {
    for (int i = 0; i < 5; ++i) backend->RaiseXid(0, 48, clock.Now());
  });
  xids.join();
  for (int i = 0; i < 10; ++i) tick();
  EXPECT_EQ((*engine)->Latest()->seq, 12u);
  EXPECT_EQ((*engine)->Health()->gpus[0].status, HealthStatus::kFail);
  const Snapshot::Counters waiting = (*engine)->Latest()->counters;
  EXPECT_GE(waiting.persistence_pending, 2u);  // GPU 1's XID 79, GPU 0's XID 48
  EXPECT_EQ(waiting.persistence_lag, absl::Seconds(10));
  EXPECT_EQ(waiting.persistence_failures, 0u);

  env.UnblockSyncs();
  engine->reset();  // persists what is pending before it stops
  IncidentStore::Loaded loaded;
  ASSERT_TRUE(IncidentStore::Open({.state_dir = dir.path(), .boot_id = "boot-a"}, &loaded).ok());
  std::vector<uint32_t> failed;
  for (const Incident& incident : loaded.incidents) failed.push_back(incident.gpu);
  EXPECT_THAT(failed, ::testing::UnorderedElementsAre(0, 1));
}

TEST(FanoutTest, LimitsListenersAndRefusesAfterStop) {
  Fanout<SnapshotPtr> fanout(1);
  ASSERT_TRUE(fanout.Add(std::make_shared<RecordingListener>()).ok());
  EXPECT_EQ(fanout.Add(std::make_shared<RecordingListener>()).code(),
            absl::StatusCode::kResourceExhausted);
  fanout.Stop(absl::UnavailableError("bye"));
  EXPECT_EQ(fanout.Add(std::make_shared<RecordingListener>()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(BoundedQueueTest, DropsOldestWhenFullAndCounts) {
  BoundedQueue<int> queue(2);
  EXPECT_TRUE(queue.Push(1));
  EXPECT_TRUE(queue.Push(2));
  EXPECT_FALSE(queue.Push(3));
  queue.Push(4);
  queue.Push(5);
  EXPECT_EQ(queue.dropped(), 3u);
  EXPECT_EQ(queue.Pop(), 4);
  EXPECT_EQ(queue.Pop(), 5);
  EXPECT_TRUE(queue.empty());
}

// A health source the test scripts: what it reports at the next tick, and when it was asked.
class ScriptedSource : public HealthSource {
 public:
  std::vector<HealthSystem> systems() const override { return {HealthSystem::kNetwork}; }
  std::vector<SourceReport> Judge(absl::Time now) override {
    asked.push_back(now);
    return {{.system = HealthSystem::kNetwork, .findings = findings}};
  }
  std::vector<SourceFinding> findings;
  std::vector<absl::Time> asked;
};

// A source is judged on every tick, and what it finds is in that tick's verdict and event log:
// the GPU it names fails, the other stays PASS.
TEST_F(SimEngineTest, AHealthSourcesFindingsAreInTheVerdictOfTheTickThatJudgedThem) {
  StartEngine(0);
  auto source = std::make_unique<ScriptedSource>();
  ScriptedSource* scripted = source.get();
  engine_->AddHealthSource(std::move(source));
  Tick();
  const auto network = static_cast<size_t>(HealthSystem::kNetwork);
  ASSERT_EQ(engine_->Health()->gpus[1].systems.size(), network + 1);
  EXPECT_EQ(engine_->Health()->gpus[1].systems[network].status, HealthStatus::kPass);
  scripted->findings = {{.gpus = {1},
                         .status = HealthStatus::kFail,
                         .key = "network.state.mlx5_1/1",
                         .code = "VIGIL_FR_NET_PORT_DOWN",
                         .message = "port mlx5_1/1 is DOWN/Disabled",
                         .sticky = false}};
  Tick();
  EXPECT_EQ(scripted->asked,
            (std::vector<absl::Time>{clock_.Now() - absl::Seconds(1), clock_.Now()}));
  const auto health = engine_->Health();
  EXPECT_EQ(health->seq, engine_->Latest()->seq);
  EXPECT_EQ(health->gpus[1].systems[network].status, HealthStatus::kFail);
  EXPECT_EQ(health->gpus[0].systems[network].status, HealthStatus::kPass);
  EXPECT_THAT(events_->Messages(EventKind::kHealthTransition),
              ::testing::Contains(::testing::HasSubstr(
                  "GPU 1 (" + engine_->gpus()[1].uuid +
                  ") network: PASS -> FAIL: VIGIL_FR_NET_PORT_DOWN: port mlx5_1/1 is "
                  "DOWN/Disabled")));
}

}  // namespace
}  // namespace vigil
