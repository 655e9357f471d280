// Tests of the kernel log record parser and the splitter of saved logs: the header fields, the
// facility (a process's line is not the kernel's), \xNN escapes, dictionary lines, and records
// split across reads of any size.
#include "kmsg/record.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::kmsg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(KmsgRecordTest, ParsesTheHeaderAndTheMessage) {
  // The shape of Documentation/ABI/testing/dev-kmsg's example.
  auto record = ParseRecord(
      "7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)\n"
      " SUBSYSTEM=acpi\n"
      " DEVICE=+acpi:PNP0A03:00\n");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->facility, 0);
  EXPECT_EQ(record->level, 7);
  EXPECT_EQ(record->sequence, 160u);
  EXPECT_EQ(record->monotonic_us, 424069);
  EXPECT_FALSE(record->continued);
  EXPECT_EQ(record->message,
            "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)");
  EXPECT_THAT(record->dictionary,
              ElementsAre(Pair("SUBSYSTEM", "acpi"), Pair("DEVICE", "+acpi:PNP0A03:00")));
}

TEST(KmsgRecordTest, TheFacilitySaysWhoWroteIt) {
  // A process writing to /dev/kmsg gets the user facility (1) unless it says otherwise; the
  // kernel's own lines are facility 0.
  auto kernel = ParseRecord("4,12,5,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.");
  auto user = ParseRecord("12,13,6,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.");
  ASSERT_TRUE(kernel.ok() && user.ok());
  EXPECT_EQ(kernel->facility, 0);
  EXPECT_EQ(kernel->level, 4);
  EXPECT_EQ(user->facility, 1);
  EXPECT_EQ(user->level, 4);
}

TEST(KmsgRecordTest, UnescapesNonPrintableBytes) {
  auto record = ParseRecord("6,1,2,c,extra;first\\x0asecond \\x5c done \\xZZ \\x4");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_TRUE(record->continued);
  EXPECT_EQ(record->message, "first\nsecond \\ done \\xZZ \\x4");
}

TEST(KmsgRecordTest, RefusesWhatIsNotARecord) {
  for (const char* bad : {"", "no semicolon", "6,1,2;missing flags", "a,1,2,-;x", "6,,2,-;x",
                          "6,1,99999999999999999999,-;x", "6,1,2,-;ok\nnot a continuation"}) {
    auto record = ParseRecord(bad);
    EXPECT_FALSE(record.ok()) << bad;
    if (!record.ok()) {
      EXPECT_THAT(record.status().message(), HasSubstr("kernel log record"));
    }
  }
}

TEST(KmsgRecordTest, TheSplitterCutsASavedLogIntoRecordsWhateverTheReadSize) {
  const std::string log =
      "6,1,100,-;first line\n"
      " SUBSYSTEM=pci\n"
      " DEVICE=+pci:0000:3b:00.0\n"
      "4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
      "6,3,300,-;last\n";
  for (size_t chunk = 1; chunk <= log.size(); ++chunk) {
    std::vector<std::string> records;
    Splitter splitter([&](std::string_view record) { records.emplace_back(record); });
    for (size_t at = 0; at < log.size(); at += chunk) splitter.Feed(log.substr(at, chunk));
    splitter.Finish();
    ASSERT_THAT(records,
                ElementsAre("6,1,100,-;first line\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0",
                            "4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off "
                            "the bus.",
                            "6,3,300,-;last"))
        << "chunk " << chunk;
    EXPECT_THAT(ParseRecord(records[0])->dictionary,
                ElementsAre(Pair("SUBSYSTEM", "pci"), Pair("DEVICE", "+pci:0000:3b:00.0")));
  }
}

TEST(KmsgRecordTest, APauseEndsARecordAndOverlongLinesAreCut) {
  std::vector<std::string> records;
  Splitter splitter([&](std::string_view record) { records.emplace_back(record); }, 32);
  splitter.Feed("6,1,100,-;a live log\n");
  EXPECT_TRUE(records.empty()) << "a dictionary line may still follow";
  splitter.Pause();  // the reader found nothing more to read for now
  ASSERT_EQ(records.size(), 1u);
  splitter.Pause();
  EXPECT_EQ(records.size(), 1u) << "idempotent";
  // A line split across writes waits for its end through a pause.
  std::vector<std::string> whole;
  Splitter patient([&](std::string_view record) { whole.emplace_back(record); });
  patient.Feed("4,9,1,c;NVRM: Xid (PCI:0000:3b:00): 7");
  patient.Pause();
  EXPECT_TRUE(whole.empty()) << "not XID 7";
  patient.Feed("9, GPU has fallen off the bus.\n");
  patient.Pause();
  EXPECT_THAT(whole,
              ElementsAre("4,9,1,c;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."));
  splitter.Feed("6,2,100,-;" + std::string(1000, 'x') + "\n6,3,1,-;next\n");
  splitter.Finish();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].size(), 32u);
  EXPECT_EQ(records[2], "6,3,1,-;next");
}

}  // namespace
}  // namespace vigil::kmsg
