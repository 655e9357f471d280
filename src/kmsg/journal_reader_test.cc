// Tests of the journal reader on journal files written by systemd's own tool
// (systemd-journal-remote, testing/journal.h): this boot's kernel entries become records with the
// kernel's facility, level and timestamp and the journal's sequence; other boots' entries and
// other transports are not read; entries appended later are followed after Start(); an absent
// journal is a state, not an error. Also the XID source falling back to the journal when the
// kernel log cannot be opened, its replay state keyed to the journal.
#include "kmsg/journal_reader.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kmsg/kernel_log_xids.h"
#include "testing/eventually.h"
#include "testing/journal.h"
#include "testing/temp_dir.h"

namespace vigil::kmsg {
namespace {

using testing::AppendJournal;
using ::testing::ElementsAre;
using testing::KernelEntry;

constexpr char kBoot[] = "2f0b7c2e-0000-4000-8000-000000000001";
constexpr char kOtherBoot[] = "2f0b7c2e-0000-4000-8000-000000000002";

class Records {
 public:
  void Add(const Record& record) {
    absl::MutexLock lock(&mutex_);
    records_.push_back(record);
  }
  std::vector<Record> Get() {
    absl::MutexLock lock(&mutex_);
    return records_;
  }
  std::vector<std::string> Messages() {
    std::vector<std::string> messages;
    for (const Record& record : Get()) messages.push_back(record.message);
    return messages;
  }

 private:
  absl::Mutex mutex_;
  std::vector<Record> records_ ABSL_GUARDED_BY(mutex_);
};

TEST(JournalCursorTest, TheSequenceIsTheCursorsIField) {
  EXPECT_EQ(JournalCursorSequence("s=0a1b;i=1f;b=00ff;m=12;t=34;x=56"), 0x1fu);
  EXPECT_EQ(JournalCursorSequence("i=0"), 0u);
  EXPECT_EQ(JournalCursorSequence("s=0a1b;b=00ff"), std::nullopt);
  EXPECT_EQ(JournalCursorSequence("s=0a1b;i=zz"), std::nullopt);
}

TEST(JournalReaderTest, ThisBootsKernelEntriesAreReadThenFollowed) {
  vigil::testing::TempDir dir;
  const std::string journal = (dir.path() / "journal").string();
  auto service = KernelEntry(kBoot, "NVRM: Xid (PCI:0000:3b:00): 13, from a service", 7'000'000);
  service["_TRANSPORT"] = "syslog";
  ASSERT_TRUE(
      AppendJournal(journal, {KernelEntry(kOtherBoot, "an earlier boot's line", 1'000'000),
                              KernelEntry(kBoot, "Linux version 6.1.0", 1'000),
                              KernelEntry(kBoot,
                                          "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                                          "name=<unknown>, GPU has fallen off the bus.",
                                          60'000'000),
                              service})
          .ok());
  Records records;
  JournalReader reader({.directory = journal, .boot_id = kBoot},
                       [&](const Record& record) { records.Add(record); });
  reader.CatchUp();
  EXPECT_EQ(reader.stats().state.load(), LogState::kReading);
  ASSERT_THAT(records.Messages(),
              ElementsAre("Linux version 6.1.0",
                          "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU "
                          "has fallen off the bus."));
  const std::vector<Record> caught_up = records.Get();
  EXPECT_EQ(caught_up[1].facility, 0);
  EXPECT_EQ(caught_up[1].level, 4);
  EXPECT_EQ(caught_up[1].monotonic_us, 60'000'000);
  EXPECT_GT(caught_up[1].sequence, caught_up[0].sequence) << "the journal's own order";
  EXPECT_EQ(reader.description(), "journal " + journal);

  reader.Start();
  ASSERT_TRUE(AppendJournal(journal, {KernelEntry(kBoot, "a later line", 61'000'000)}).ok());
  EXPECT_TRUE(vigil::testing::Eventually([&] { return records.Get().size() == 3; }));
  EXPECT_EQ(records.Messages().back(), "a later line");
  reader.Stop();
}

TEST(JournalReaderTest, AnAbsentJournalIsAState) {
  vigil::testing::TempDir dir;
  Records records;
  JournalReader reader({.directory = (dir.path() / "none").string(), .boot_id = kBoot},
                       [&](const Record& record) { records.Add(record); });
  reader.CatchUp();
  EXPECT_EQ(reader.stats().state.load(), LogState::kAbsent);
  reader.Stop();
}

class Sink : public EventSink {
 public:
  void OnXid(const XidEvent& event) override {
    absl::MutexLock lock(&mutex_);
    xids_.push_back(event.xid * 100 + event.gpu);
  }
  std::vector<uint32_t> xids() {
    absl::MutexLock lock(&mutex_);
    return xids_;
  }

 private:
  absl::Mutex mutex_;
  std::vector<uint32_t> xids_ ABSL_GUARDED_BY(mutex_);
};

// /dev/kmsg closed to the engine: the XIDs come from the journal, once each across a restart.
TEST(JournalReaderTest, TheXidSourceFallsBackToTheJournalAndKeepsItsPlaceThere) {
  vigil::testing::TempDir dir;
  const std::string journal = (dir.path() / "journal").string();
  ASSERT_TRUE(
      AppendJournal(journal, {KernelEntry(kBoot,
                                          "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                                          "name=<unknown>, GPU has fallen off the bus.",
                                          60'000'000)})
          .ok());
  const std::vector<GpuIdentity> gpus = {
      {.index = 0, .uuid = "GPU-0", .pci_bus_id = "00000000:18:00.0"},
      {.index = 1, .uuid = "GPU-1", .pci_bus_id = "00000000:3B:00.0"}};
  FakeClock clock;
  const auto source = [&](Sink* sink) {
    return std::make_unique<KernelLogXids>(
        KernelLogXidsOptions{.path = (dir.path() / "no-kmsg").string(),
                             .journal_dir = journal,
                             .state_path = (dir.path() / "kmsg.state").string(),
                             .boot_id = kBoot,
                             .clock = &clock,
                             .monotonic_now = [] { return absl::Seconds(100); }},
        gpus, sink);
  };
  Sink first_sink;
  auto first = source(&first_sink);
  first->CatchUp();
  EXPECT_THAT(first_sink.xids(), ElementsAre(7901));
  EXPECT_EQ(first->source(), "journal " + journal);
  EXPECT_EQ(first->reader_stats().state.load(), LogState::kReading);
  clock.Advance(kSettle + absl::Seconds(1));
  first->Stop();  // writes down the settled XID, keyed to the journal

  Sink second_sink;
  auto second = source(&second_sink);
  second->CatchUp();
  EXPECT_TRUE(second_sink.xids().empty()) << "applied by the run before, in this boot";
  second->Stop();
}

}  // namespace
}  // namespace vigil::kmsg
