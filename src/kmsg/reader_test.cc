// Tests of the kernel log reader on what the tests can make: a regular file it follows as it
// grows (and reads again from the start when it is replaced), a FIFO whose writer comes and goes,
// and a log that is absent at start and appears later. /dev/kmsg itself is a character device the
// tests cannot create; its one-record-per-read path is the same Deliver().
#include "kmsg/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"

namespace vigil::kmsg {
namespace {

using ::testing::ElementsAre;
using vigil::testing::Eventually;

class ReaderTest : public ::testing::Test {
 protected:
  std::unique_ptr<Reader> StartReader(const std::string& path) {
    auto reader = std::make_unique<Reader>(
        ReaderOptions{.path = path, .follow_interval = absl::Milliseconds(10), .clock = &clock_},
        [this](const Record& record) {
          absl::MutexLock lock(&mutex_);
          messages_.push_back(record.message);
        });
    reader->Start();
    return reader;
  }
  std::vector<std::string> Messages() {
    absl::MutexLock lock(&mutex_);
    return messages_;
  }
  bool Got(size_t count) {
    return Eventually([&] { return Messages().size() >= count; }, absl::Seconds(10),
                      absl::Milliseconds(5));
  }

  vigil::testing::TempDir dir_;
  FakeClock clock_;
  absl::Mutex mutex_;
  std::vector<std::string> messages_ ABSL_GUARDED_BY(mutex_);
};

void Append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::app) << text << std::flush;
}

TEST_F(ReaderTest, ReadsAFileFromItsStartAndFollowsItAsItGrows) {
  const std::string path = (dir_.path() / "kmsg").string();
  Append(path, "6,1,100,-;booted\n SUBSYSTEM=pci\nnot a record\n");
  auto reader = StartReader(path);
  ASSERT_TRUE(Got(1));
  // The dictionary line belongs to the first record; the bad one is counted, not delivered.
  EXPECT_EQ(Messages()[0], "booted");
  Append(path, "4,3,300,c;NVRM: Xid (PCI:0000:3b:00): 48, y\n");
  ASSERT_TRUE(Got(2));
  EXPECT_THAT(Messages(), ElementsAre("booted", "NVRM: Xid (PCI:0000:3b:00): 48, y"));
  EXPECT_EQ(reader->stats().bad_records, 1u);
  EXPECT_EQ(reader->stats().state, LogState::kReading);
  // A record written in two pieces is delivered once, whole.
  Append(path, "4,4,400,c;NVRM: Xid (PCI:00");
  Append(path, "00:3b:00): 13, z\n");
  ASSERT_TRUE(Got(3));
  EXPECT_EQ(Messages()[2], "NVRM: Xid (PCI:0000:3b:00): 13, z");
}

TEST_F(ReaderTest, AReplacedFileIsReadFromItsStart) {
  const std::string path = (dir_.path() / "kmsg").string();
  Append(path, "6,1,100,-;old\n");
  auto reader = StartReader(path);
  ASSERT_TRUE(Got(1));
  const std::string next = (dir_.path() / "kmsg.new").string();
  Append(next, "6,1,100,-;new boot\n");
  std::filesystem::rename(next, path);
  ASSERT_TRUE(Got(2));
  EXPECT_THAT(Messages(), ElementsAre("old", "new boot"));
}

TEST_F(ReaderTest, AFifoIsFollowedWhileItsWriterComesAndGoes) {
  const std::string path = (dir_.path() / "kmsg.fifo").string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto reader = StartReader(path);
  ASSERT_TRUE(Eventually([&] { return reader->stats().state == LogState::kReading; }));
  {
    std::ofstream writer(path);
    writer << "6,1,100,-;first writer\n" << std::flush;
  }
  ASSERT_TRUE(Got(1));
  {
    std::ofstream writer(path);
    writer << "6,2,200,-;second writer\n" << std::flush;
  }
  ASSERT_TRUE(Got(2));
  EXPECT_THAT(Messages(), ElementsAre("first writer", "second writer"));
  EXPECT_EQ(reader->stats().reopens, 0u);
}

TEST_F(ReaderTest, AFifoReplacedUnderTheReaderIsOpenedAgain) {
  const std::string path = (dir_.path() / "kmsg.fifo").string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto reader = StartReader(path);
  ASSERT_TRUE(Eventually([&] { return reader->stats().state == LogState::kReading; }));
  std::filesystem::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);  // the next replay's FIFO
  ASSERT_TRUE(Eventually([&] { return reader->stats().reopens == 1; }));
  {
    std::ofstream writer(path);
    writer << "6,1,100,-;on the new fifo\n" << std::flush;
  }
  ASSERT_TRUE(Got(1));
  EXPECT_EQ(Messages()[0], "on the new fifo");
}

TEST_F(ReaderTest, AnAbsentLogIsAStateAndIsOpenedWhenItAppears) {
  const std::string path = (dir_.path() / "later").string();
  auto reader = StartReader(path);
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_EQ(reader->stats().state, LogState::kAbsent);
  Append(path, "6,1,100,-;here now\n");
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Got(1));
  EXPECT_EQ(reader->stats().state, LogState::kReading);
}

TEST_F(ReaderTest, AnUnreadableLogIsAState) {
  auto reader = StartReader(dir_.path().string());  // a directory
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_EQ(reader->stats().state, LogState::kUnreadable);
  reader->Stop();
  EXPECT_TRUE(Messages().empty());
}

}  // namespace
}  // namespace vigil::kmsg
