// Tests of the flight recorder on the simulator and a fake clock: an XID 79 recorded with the 15
// minutes before it, kept through a kill and a restart on the same state dir (and not recorded
// again there); the time after, once it has passed; the limits; and a full disk, which costs the
// recording and nothing else.
#include "recorder/flight_recorder.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "backend/sim_backend.h"
#include "fields/catalogue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

class FlightRecorderTest : public ::testing::Test {
 protected:
  // A (new) engine on the state dir, and its recorder.
  void StartEngine(FlightRecorderConfig config = {}, EngineConfig engine_config = {},
                   uint32_t gpu_count = 4) {
    auto sim = SimBackend::Create({.gpu_count = gpu_count, .seed = 5});
    ASSERT_TRUE(sim.ok());
    sim_ = sim->get();
    auto engine = Engine::Create({.node_name = "node-a",
                                  .config = std::move(engine_config),
                                  .clock = &clock_,
                                  .state_dir = dir_.path(),
                                  .boot_id = "boot-1"},
                                 std::move(*sim));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    auto recorder = FlightRecorder::Start(engine_.get(),
                                          {.dir = Dir(), .config = config, .env = &recorder_env_});
    ASSERT_TRUE(recorder.ok()) << recorder.status();
    recorder_ = std::move(*recorder);
  }
  // A kill -9: nothing more is written (the recorder's pending work is done first only so that
  // the test knows what reached the disk).
  void Kill() {
    recorder_->Flush();
    recorder_.reset();
    engine_.reset();
  }
  void Tick(int count = 1, absl::Duration interval = absl::Seconds(1)) {
    for (int i = 0; i < count; ++i) {
      clock_.Advance(interval);
      engine_->RunTick();
    }
  }
  std::string Dir() const { return dir_.path().string() + "/recordings"; }
  std::vector<std::string> Files() {
    auto names = Env::Default()->ListDir(Dir());
    std::vector<std::string> files;
    for (const std::string& name : names.value_or(std::vector<std::string>{})) {
      if (name.ends_with(kRecordingSuffix)) files.push_back(name);
    }
    return files;
  }
  Recording Read(const std::string& name) {
    std::ifstream in(Dir() + "/" + name, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    auto recording = DecodeRecording(bytes.str());
    EXPECT_TRUE(recording.ok()) << recording.status();
    return recording.ok() ? *recording : Recording{};
  }
  void Xid(uint32_t gpu, uint32_t xid) { sim_->RaiseXid(gpu, xid, clock_.Now()); }

  testing::TempDir dir_;
  testing::FaultEnv recorder_env_;  // the recorder's disk only (the engine's incidents have theirs)
  FakeClock clock_;
  SimBackend* sim_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<FlightRecorder> recorder_;
};

TEST_F(FlightRecorderTest, AnXid79IsRecordedWithTheQuarterHourBeforeAndSurvivesARestart) {
  StartEngine();
  Tick(20 * 60);  // twenty minutes of telemetry
  const absl::Time fault = clock_.Now() + absl::Seconds(1);
  Tick();
  Xid(2, 79);
  Tick();
  ASSERT_EQ(engine_->Health()->gpus[2].status, HealthStatus::kFail);
  Tick(30);  // half a minute of the time after, then the engine is killed
  Kill();

  // Another engine on the same state dir (the node rebooted, or the pod was replaced).
  StartEngine();
  Tick(3 * 60);
  recorder_->Flush();
  const std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 1u) << "a FAIL restored at start is not recorded again";
  const Recording recording = Read(files[0]);
  EXPECT_EQ(recording.gpu, 2u);
  EXPECT_EQ(recording.node_name, "node-a");
  EXPECT_FALSE(recording.complete) << "killed before the time after ended";
  EXPECT_THAT(recording.trigger_summary, ::testing::HasSubstr("XID 79"));
  ASSERT_FALSE(recording.incidents.empty());
  EXPECT_EQ(recording.incidents[0].code, "DCGM_FR_FALLEN_OFF_BUS");
  // Every sampled field, and for the 1 s ones the whole quarter of an hour before the XID.
  EXPECT_EQ(recording.series.size(), engine_->layout().size());
  const int64_t trigger = recording.trigger_time_us;
  for (const RecordingSeries& series : recording.series) {
    if (series.field != 155) continue;  // power, every second
    ASSERT_FALSE(series.samples.empty());
    EXPECT_LE(series.samples.front().time_us,
              trigger - absl::ToInt64Microseconds(absl::Minutes(15)) + 1'000'000);
    EXPECT_GE(series.samples.front().time_us,
              trigger - absl::ToInt64Microseconds(absl::Minutes(15)));
    EXPECT_GE(series.samples.size(), 15u * 60);
    EXPECT_EQ(series.samples.back().time_us, trigger);  // what was known when it was written
  }
  EXPECT_GE(absl::FromUnixMicros(trigger), fault);
  // Compact: a quarter of an hour of every field of one GPU in well under a MiB.
  auto size = Env::Default()->FileSize(Dir() + "/" + files[0]);
  ASSERT_TRUE(size.ok());
  EXPECT_LT(*size, uint64_t{1} << 20);
  RecordProperty("recording_bytes", std::to_string(*size));
}

TEST_F(FlightRecorderTest, TheTimeAfterIsAddedOnceItHasPassed) {
  StartEngine({.window = absl::Minutes(2), .after = absl::Minutes(1)});
  Tick(5 * 60);
  Xid(1, 79);
  Tick();
  Tick(90);
  recorder_->Flush();
  const std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 1u);
  const Recording recording = Read(files[0]);
  EXPECT_TRUE(recording.complete);
  for (const RecordingSeries& series : recording.series) {
    if (series.field != 150) continue;  // temperature
    ASSERT_FALSE(series.samples.empty());
    EXPECT_EQ(series.samples.back().time_us, recording.window_end_us);
    EXPECT_EQ(recording.window_end_us - recording.trigger_time_us, 60'000'000);
    // The GPU is gone after the XID 79 (lost in the simulator): its samples say so.
  }
  EXPECT_EQ(recorder_->stats().files_written, 2u);  // the part before, then the whole
}

TEST_F(FlightRecorderTest, TheOldestRecordingsGoPastTheLimit) {
  StartEngine({.window = absl::Minutes(1), .after = absl::ZeroDuration(), .max_recordings = 2});
  Tick(70);
  for (uint32_t gpu : {0u, 1u, 3u}) {
    Xid(gpu, 79);
    Tick(2);
  }
  recorder_->Flush();
  const std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(Read(files[0]).gpu, 1u);
  EXPECT_EQ(Read(files[1]).gpu, 3u);
  EXPECT_EQ(recorder_->stats().removed, 1u);
}

// Three GPUs fail within the time after of the first: the limit of two is exceeded, but a
// recording still waiting for its time after is not removed (its second write would bring it
// back without the window the limit took); once complete, the oldest goes.
TEST_F(FlightRecorderTest, ARecordingWhoseTimeAfterIsOpenIsNotRemovedByTheLimits) {
  StartEngine({.window = absl::Minutes(1), .after = absl::Minutes(1), .max_recordings = 2});
  Tick(70);
  for (uint32_t gpu : {0u, 1u, 3u}) {
    Xid(gpu, 79);
    Tick(2);
  }
  recorder_->Flush();
  EXPECT_EQ(Files().size(), 3u) << "all three are still open";
  EXPECT_EQ(recorder_->stats().removed, 0u);
  Tick(70);  // every time after has passed
  recorder_->Flush();
  const std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(Read(files[0]).gpu, 1u);
  EXPECT_TRUE(Read(files[0]).complete);
  EXPECT_EQ(Read(files[1]).gpu, 3u);
  EXPECT_TRUE(Read(files[1]).complete);
}

// A quarter hour's window of every field at a fast tick holds more samples than the engine
// gives in one answer: the recorder reads it in pieces, every tick once.
TEST_F(FlightRecorderTest, AWindowLargerThanOneHistoryAnswerIsReadInPieces) {
  EngineConfig engine_config;
  engine_config.tick_interval = absl::Milliseconds(100);
  for (const FieldInfo& field : AllFields()) {
    engine_config.interval_overrides[field.id] = absl::Milliseconds(100);
  }
  StartEngine({.window = absl::Minutes(15), .after = absl::ZeroDuration()},
              std::move(engine_config), /*gpu_count=*/1);
  const absl::Time start = clock_.Now();
  Tick(9'100, absl::Milliseconds(100));
  ASSERT_FALSE(engine_->History({.gpus = {0}, .start = start}).ok())
      << "the window fits one answer: the test shows nothing";
  Xid(0, 79);
  Tick(1, absl::Milliseconds(100));
  recorder_->Flush();
  const std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 1u);
  const Recording recording = Read(files[0]);
  bool temperature = false;
  for (const RecordingSeries& series : recording.series) {
    if (series.field != 150) continue;  // temperature, sampled every tick
    temperature = true;
    ASSERT_EQ(series.samples.size(), 9'001u);  // the quarter hour before and the failing tick
    for (size_t i = 1; i < series.samples.size(); ++i) {
      ASSERT_EQ(series.samples[i].seq, series.samples[i - 1].seq + 1) << i;
    }
  }
  EXPECT_TRUE(temperature);
}

TEST_F(FlightRecorderTest, AFullDiskCostsTheRecordingAndNothingElse) {
  StartEngine({.window = absl::Minutes(1), .after = absl::ZeroDuration()});
  Tick(70);
  recorder_env_.FailNext(testing::FaultEnv::Op::kAppend, ENOSPC);
  Xid(0, 79);
  Tick();
  recorder_->Flush();
  EXPECT_EQ(recorder_->stats().write_failures, 1u);
  EXPECT_TRUE(Files().empty());
  // The engine goes on: ticks, history, health.
  Tick(5);
  EXPECT_EQ(engine_->Latest()->seq, 76u);
  EXPECT_EQ(engine_->Health()->gpus[0].status, HealthStatus::kFail);
  auto history = engine_->History({.gpus = {1}, .fields = {155}});
  ASSERT_TRUE(history.ok());
  EXPECT_FALSE((*history)[0].samples.empty());
  // Space again: the next FAIL is recorded.
  Xid(3, 79);
  Tick();
  recorder_->Flush();
  EXPECT_EQ(Files().size(), 1u);
  EXPECT_EQ(recorder_->stats().files_written, 1u);
}

}  // namespace
}  // namespace vigil
