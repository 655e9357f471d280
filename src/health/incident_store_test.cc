// Tests of the incident log: what survives a reopen, torn and corrupt records, reboots, and
// every disk failure the writer must ride out (through testing::FaultEnv) — a full disk, EIO on
// fsync, a torn write, a failed rename while compacting, an fsync that blocks — with the FAIL
// still served and nothing already persisted lost.
#include "health/incident_store.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/eventually.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using testing::Eventually;

using ::testing::Contains;
using testing::FaultEnv;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

absl::StatusOr<std::unique_ptr<IncidentStore>> Open(const testing::TempDir& dir,
                                                    const std::string& boot,
                                                    IncidentStore::Loaded* loaded,
                                                    Env* env = Env::Default(),
                                                    Clock* clock = Clock::Real()) {
  return IncidentStore::Open({.state_dir = dir.path(), .boot_id = boot, .env = env, .clock = clock},
                             loaded);
}

// The writer failed `failures` times and now waits out its backoff on `clock`.
bool WaitingAfter(IncidentStore& store, const FakeClock& clock, uint64_t failures) {
  return Eventually([&] { return store.stats().failures == failures && clock.waiters() == 1; },
                    absl::Seconds(10), absl::Milliseconds(1));
}

std::vector<std::string> Uuids(const IncidentStore::Loaded& loaded) {
  std::vector<std::string> uuids;
  for (const Incident& incident : loaded.incidents) uuids.push_back(incident.uuid);
  return uuids;
}

Incident Failure(std::string uuid, std::string key) {
  return Incident{.gpu = 2,
                  .uuid = std::move(uuid),
                  .system = HealthSystem::kDriver,
                  .status = HealthStatus::kFail,
                  .key = std::move(key),
                  .code = "DCGM_FR_FALLEN_OFF_BUS",
                  .message = "XID 79",
                  .action = "restart",
                  .first_seen = kT0,
                  .last_seen = kT0 + absl::Seconds(5),
                  .count = 2};
}

TEST(IncidentStoreTest, RaisedFailuresSurviveAReopenAndClearsStick) {
  testing::TempDir dir;
  IncidentStore::Loaded loaded;
  {
    auto store = Open(dir, "boot-a", &loaded);
    ASSERT_TRUE(store.ok()) << store.status();
    Incident reboot = Failure("GPU-a", "xid.79");
    reboot.recommended = RecommendedAction::kReboot;
    reboot.log_position = LogPosition{.source = "/dev/kmsg", .sequence = 4711};
    (*store)->Raised(reboot);
    (*store)->Raised(Failure("GPU-b", "xid.79"));
    (*store)->Cleared(Failure("GPU-b", "xid.79"), "operator");
  }
  auto store = Open(dir, "boot-a", &loaded);
  ASSERT_TRUE(store.ok());
  ASSERT_EQ(loaded.incidents.size(), 1u);
  EXPECT_EQ(loaded.incidents[0].uuid, "GPU-a");
  EXPECT_EQ(loaded.incidents[0].first_seen, kT0);
  EXPECT_EQ(loaded.incidents[0].count, 2u);
  EXPECT_EQ(loaded.incidents[0].recommended, RecommendedAction::kReboot);
  EXPECT_EQ(loaded.incidents[0].log_position,
            (LogPosition{.source = "/dev/kmsg", .sequence = 4711}));
  EXPECT_TRUE(loaded.problems.empty());
  // Compacted: the boot record and the one surviving incident.
  std::ifstream file(dir.File("health.log"));
  int lines = 0;
  for (std::string line; std::getline(file, line);) ++lines;
  EXPECT_EQ(lines, 2);
}

TEST(IncidentStoreTest, NodeFailuresAndOperatorClearsSurviveAReopenButNotAReboot) {
  testing::TempDir dir;
  IncidentStore::Loaded loaded;
  Incident nvswitch = Failure("", "sxid.20034.00000000:06:00.0");
  nvswitch.node_level = true;
  nvswitch.system = HealthSystem::kNvswitch;
  nvswitch.gpu = 0;
  {
    auto store = Open(dir, "boot-a", &loaded);
    ASSERT_TRUE(store.ok()) << store.status();
    (*store)->Raised(nvswitch);
    (*store)->OperatorCleared({.uuid = "GPU-a", .system = HealthSystem::kDriver, .time = kT0});
    (*store)->OperatorCleared(
        {.uuid = "GPU-a", .system = HealthSystem::kDriver, .time = kT0 + absl::Minutes(5)});
    (*store)->OperatorCleared({.uuid = "", .system = std::nullopt, .time = kT0});
  }
  for (int reopen = 0; reopen < 2; ++reopen) {  // the second reads the compacted log
    auto store = Open(dir, "boot-a", &loaded);
    ASSERT_TRUE(store.ok());
    ASSERT_EQ(loaded.incidents.size(), 1u);
    EXPECT_TRUE(loaded.incidents[0].node_level);
    EXPECT_EQ(loaded.incidents[0].system, HealthSystem::kNvswitch);
    ASSERT_EQ(loaded.clears.size(), 2u) << "the latest per GPU and system";
    std::map<std::string, absl::Time> latest;
    for (const OperatorClear& clear : loaded.clears) latest[clear.uuid] = clear.time;
    EXPECT_EQ(latest["GPU-a"], kT0 + absl::Minutes(5));
    EXPECT_EQ(latest[""], kT0);
  }
  auto store = Open(dir, "boot-b", &loaded);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(loaded.incidents.empty());
  EXPECT_TRUE(loaded.clears.empty()) << "a reboot starts the kernel log afresh";
}

TEST(IncidentStoreTest, TornAndCorruptRecordsAreReportedAndSkipped) {
  testing::TempDir dir;
  IncidentStore::Loaded loaded;
  {
    auto store = Open(dir, "boot-a", &loaded);
    (*store)->Raised(Failure("GPU-a", "xid.79"));
    (*store)->Raised(Failure("GPU-b", "xid.48"));
    (*store)->Raised(Failure("GPU-c", "xid.95"));
  }
  std::string text;
  {
    std::ifstream file(dir.File("health.log"));
    std::stringstream buffer;
    buffer << file.rdbuf();
    text = buffer.str();
  }
  // Corrupt the GPU-b record in the middle, and tear a half-written record onto the end.
  text.replace(text.find("GPU-b"), 5, "GPU-X");
  text += "1234abcd {\"op\":\"raise\",\"uuid\":\"GPU-d\"";
  std::ofstream(dir.File("health.log")) << text;
  auto store = Open(dir, "boot-a", &loaded);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_EQ(loaded.incidents.size(), 2u);
  EXPECT_EQ(loaded.incidents[0].uuid, "GPU-a");
  EXPECT_EQ(loaded.incidents[1].uuid, "GPU-c");
  ASSERT_EQ(loaded.problems.size(), 2u);
  EXPECT_THAT(loaded.problems[0], HasSubstr("health.log:3"));
  EXPECT_THAT(loaded.problems[1], HasSubstr("health.log:5"));
}

TEST(IncidentStoreTest, ARebootClearsPersistedFailures) {
  testing::TempDir dir;
  IncidentStore::Loaded loaded;
  {
    auto store = Open(dir, "boot-a", &loaded);
    (*store)->Raised(Failure("GPU-a", "xid.79"));
  }
  ASSERT_TRUE(Open(dir, "boot-b", &loaded).ok());
  EXPECT_TRUE(loaded.rebooted);
  EXPECT_EQ(loaded.dropped, 1u);
  EXPECT_TRUE(loaded.incidents.empty());
  ASSERT_TRUE(Open(dir, "boot-b", &loaded).ok());
  EXPECT_FALSE(loaded.rebooted);
}

TEST(IncidentStoreTest, AnUnwritableStateDirIsAnError) {
  IncidentStore::Loaded loaded;
  EXPECT_FALSE(
      IncidentStore::Open({.state_dir = "/proc/nonexistent", .boot_id = "boot"}, &loaded).ok());
}

// A store on a FaultEnv and a fake clock, opened fresh for each test.
class IncidentStoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = Open(dir, "boot-a", &loaded, &env, &clock);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store = std::move(*opened);
  }
  // Closes the store (persisting what is queued) and reopens the log as a restart would.
  IncidentStore::Loaded Reopen() {
    store.reset();
    IncidentStore::Loaded reloaded;
    EXPECT_TRUE(Open(dir, "boot-a", &reloaded).ok());
    return reloaded;
  }

  testing::TempDir dir;
  FaultEnv env;
  FakeClock clock{kT0};
  IncidentStore::Loaded loaded;
  std::unique_ptr<IncidentStore> store;
};

// A full disk: the append fails, the writer logs once, counts, and retries the same record after
// its backoff (on the injected clock); nothing queued is lost or reordered.
TEST_F(IncidentStoreFaultTest, AFullDiskIsRetriedUntilTheRecordIsDurable) {
  env.FailNext(FaultEnv::Op::kAppend, ENOSPC, 2);
  store->Raised(Failure("GPU-a", "xid.79"));
  store->Raised(Failure("GPU-b", "xid.48"));
  // Two failed attempts, each followed by a backoff wait on the clock; nothing is durable yet.
  for (uint64_t failures = 1; failures <= 2; ++failures) {
    ASSERT_TRUE(WaitingAfter(*store, clock, failures));
    EXPECT_EQ(store->stats().pending, 2u);
    clock.Advance(absl::Seconds(10));
  }
  ASSERT_TRUE(store->Flush(absl::Seconds(10)));
  const IncidentStore::Stats stats = store->stats();
  EXPECT_EQ(stats.failures, 2u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.written, 2u);
  const IncidentStore::Loaded reloaded = Reopen();
  EXPECT_THAT(Uuids(reloaded), ::testing::ElementsAre("GPU-a", "GPU-b"));
  EXPECT_TRUE(reloaded.problems.empty());
}

// EIO on fsync: the record is written again and synced (the page may be gone after a failed
// fsync); a record twice in the log replays as once.
TEST_F(IncidentStoreFaultTest, AFailedFsyncWritesTheRecordAgain) {
  env.FailNext(FaultEnv::Op::kSync, EIO);
  store->Raised(Failure("GPU-a", "xid.79"));
  ASSERT_TRUE(WaitingAfter(*store, clock, 1));
  EXPECT_EQ(store->stats().pending, 1u);  // not durable yet
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->Flush(absl::Seconds(10)));
  EXPECT_THAT(env.Operations(), Contains("sync health.log FAILED"));
  const IncidentStore::Loaded reloaded = Reopen();
  EXPECT_THAT(Uuids(reloaded), ::testing::ElementsAre("GPU-a"));
}

// A torn write leaves a fragment; the retry starts on a new line, so replay skips only the
// fragment and keeps the record written before and the retried one.
TEST_F(IncidentStoreFaultTest, ATornWriteLosesNothing) {
  store->Raised(Failure("GPU-a", "xid.79"));
  ASSERT_TRUE(store->Flush(absl::Seconds(10)));
  env.TearNextAppend(20);
  store->Raised(Failure("GPU-b", "xid.48"));
  ASSERT_TRUE(WaitingAfter(*store, clock, 1));
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->Flush(absl::Seconds(10)));
  const IncidentStore::Loaded reloaded = Reopen();
  EXPECT_THAT(Uuids(reloaded), ::testing::ElementsAre("GPU-a", "GPU-b"));
  ASSERT_EQ(reloaded.problems.size(), 1u);  // the fragment
  EXPECT_THAT(reloaded.problems[0], HasSubstr("torn record skipped"));
}

// Compaction's rename fails: the old log is kept as it is, reported, counted, and appended to;
// the next open compacts it.
TEST(IncidentStoreTest, AFailedRenameWhileCompactingKeepsTheOldLog) {
  testing::TempDir dir;
  IncidentStore::Loaded loaded;
  {
    auto store = Open(dir, "boot-a", &loaded);
    (*store)->Raised(Failure("GPU-a", "xid.79"));
  }
  FaultEnv env;
  env.FailNext(FaultEnv::Op::kRename, EIO);
  {
    auto store = Open(dir, "boot-a", &loaded, &env);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_THAT(Uuids(loaded), ::testing::ElementsAre("GPU-a"));
    ASSERT_EQ(loaded.problems.size(), 1u);
    EXPECT_THAT(loaded.problems[0], HasSubstr("cannot compact"));
    EXPECT_EQ((*store)->stats().failures, 1u);
    (*store)->Raised(Failure("GPU-b", "xid.48"));
    ASSERT_TRUE((*store)->Flush(absl::Seconds(10)));
  }
  ASSERT_TRUE(Open(dir, "boot-a", &loaded).ok());
  EXPECT_THAT(Uuids(loaded), ::testing::ElementsAre("GPU-a", "GPU-b"));
  EXPECT_TRUE(loaded.problems.empty());
}

// A log appended to across a reboot (compaction failed at the first start after it) does not
// bring back what the reboot cleared.
TEST(IncidentStoreTest, ALogAppendedAcrossARebootKeepsOnlyTheNewBootsIncidents) {
  testing::TempDir dir;
  IncidentStore::Loaded loaded;
  {
    auto store = Open(dir, "boot-a", &loaded);
    (*store)->Raised(Failure("GPU-a", "xid.79"));
  }
  FaultEnv env;
  env.FailNext(FaultEnv::Op::kRename, EIO);
  {
    auto store = Open(dir, "boot-b", &loaded, &env);
    ASSERT_TRUE(store.ok());
    EXPECT_TRUE(loaded.incidents.empty());
    (*store)->Raised(Failure("GPU-b", "xid.48"));
  }
  ASSERT_TRUE(Open(dir, "boot-b", &loaded).ok());
  EXPECT_THAT(Uuids(loaded), ::testing::ElementsAre("GPU-b"));
}

// An fsync that never returns (a stuck disk) delays nothing but the persistence itself: records
// keep queueing, and stats() shows the lag.
TEST_F(IncidentStoreFaultTest, ABlockedFsyncOnlyDelaysPersistence) {
  env.BlockSyncs();
  store->Raised(Failure("GPU-a", "xid.79"));
  ASSERT_TRUE(env.AwaitBlockedSyncs(1));
  for (int i = 0; i < 100; ++i) store->Raised(Failure("GPU-" + std::to_string(i), "xid.48"));
  clock.Advance(absl::Seconds(7));
  EXPECT_EQ(store->stats().pending, 101u);
  EXPECT_EQ(store->stats().lag, absl::Seconds(7));
  env.UnblockSyncs();
  ASSERT_TRUE(store->Flush(absl::Seconds(10)));
  EXPECT_EQ(store->stats().lag, absl::ZeroDuration());
  const IncidentStore::Loaded reloaded = Reopen();
  EXPECT_EQ(reloaded.incidents.size(), 101u);
}

// Replay handles every torn shape: the log cut at every byte keeps each complete record before
// the cut and reports at most the one cut record.
TEST(IncidentStoreTest, ReplayOfALogCutAtEveryByteKeepsEveryCompleteRecord) {
  testing::TempDir dir;
  IncidentStore::Loaded loaded;
  {
    auto store = Open(dir, "boot-a", &loaded);
    (*store)->Raised(Failure("GPU-a", "xid.79"));
    (*store)->Raised(Failure("GPU-b", "xid.48"));
    (*store)->Cleared(Failure("GPU-a", "xid.79"), "reset");
  }
  const std::string full = *ReadFile(dir.File("health.log"));
  std::vector<size_t> line_ends;
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i] == '\n') line_ends.push_back(i + 1);
  }
  ASSERT_EQ(line_ends.size(), 4u);  // boot, raise a, raise b, clear a
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    testing::TempDir copy;
    std::ofstream(copy.File("health.log")) << full.substr(0, cut);
    auto store = Open(copy, "boot-a", &loaded);
    ASSERT_TRUE(store.ok()) << "cut at " << cut << ": " << store.status();
    // A record whose only missing byte is its newline is whole (its checksum holds).
    const size_t complete = std::count_if(line_ends.begin(), line_ends.end(),
                                          [&](size_t end) { return end - 1 <= cut; });
    std::vector<std::string> expected;
    if (complete >= 2 && complete < 4) expected.push_back("GPU-a");
    if (complete >= 3) expected.push_back("GPU-b");
    EXPECT_EQ(Uuids(loaded), expected) << "cut at " << cut;
    const bool partial =
        cut > 0 && std::none_of(line_ends.begin(), line_ends.end(),
                                [&](size_t end) { return cut == end || cut == end - 1; });
    EXPECT_EQ(loaded.problems.size(), partial ? 1u : 0u) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace vigil
