// Tests of the kernel log's XID source with a saved log in /dev/kmsg's format and a recording
// sink: XIDs from before the start are applied at CatchUp(), each to the GPU of its bus id; a
// restart in the same boot applies nothing twice, a new boot starts afresh; lines written by a
// process, bus ids of no GPU, SXids and their follow-ups are counted and not applied; new lines
// are followed after Start().
#include "kmsg/kernel_log_xids.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"

namespace vigil::kmsg {
namespace {

class RecordingSink : public EventSink {
 public:
  void OnXid(const XidEvent& event) override {
    absl::MutexLock lock(&mutex_);
    events_.push_back(event);
  }
  std::vector<XidEvent> events() {
    absl::MutexLock lock(&mutex_);
    return events_;
  }

 private:
  absl::Mutex mutex_;
  std::vector<XidEvent> events_ ABSL_GUARDED_BY(mutex_);
};

const std::vector<GpuIdentity> kGpus = {
    {.index = 0, .uuid = "GPU-0", .pci_bus_id = "00000000:18:00.0"},
    {.index = 1, .uuid = "GPU-1", .pci_bus_id = "00000000:2A:00.0"},
    {.index = 2, .uuid = "GPU-2", .pci_bus_id = "00000000:3B:00.0"},
};

class KernelLogXidsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = (dir_.path() / "kmsg").string();
    std::ofstream(log_)
        << "6,100,1000000,-;Linux version 6.1.0\n"
           "6,101,2000000,-;NVRM: GPU at PCI:0000:3b:00: GPU-2\n"
           "4,102,60000000,c;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU "
           "has fallen off the bus.\n"
           "12,103,60000001,-;NVRM: Xid (PCI:0000:18:00): 79, written by a process\n"
           "4,104,60000002,c;NVRM: Xid (PCI:0000:99:00): 48, pid=1, name=x, a GPU it does not "
           "have\n"
           "3,105,60000003,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 48 "
           "LTSSM Fault Up\n"
           "3,106,60000004,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Severity 1 Engine "
           "instance 48 Sub-engine instance 00\n";
  }
  // `other_lines`: the hook for the kernel's other lines (none by default).
  std::unique_ptr<KernelLogXids> Source(
      const std::string& boot_id, RecordingSink* sink,
      std::function<bool(std::string_view, absl::Time)> other_lines = nullptr) {
    return std::make_unique<KernelLogXids>(
        KernelLogXidsOptions{.path = log_,
                             .state_path = (dir_.path() / "kmsg.state").string(),
                             .boot_id = boot_id,
                             .clock = &clock_,
                             // 100 s since boot now: the XID at 60 s was logged 40 s ago.
                             .monotonic_now = [] { return absl::Seconds(100); },
                             .other_lines = std::move(other_lines)},
        kGpus, sink);
  }

  // What a source started in boot "boot-1" applies at CatchUp() from a log of `text`.
  std::vector<XidEvent> CatchUpOn(const std::string& text) {
    std::ofstream(log_) << text;
    RecordingSink sink;
    auto source = Source("boot-1", &sink);
    source->CatchUp();
    return sink.events();
  }

  // Lets what `source` applied settle, stops it, and catches up another source on the same log
  // and state, as a restart in the same boot does: what that one applies goes to `sink`.
  std::unique_ptr<KernelLogXids> Restarted(std::unique_ptr<KernelLogXids> source,
                                           RecordingSink* sink) {
    clock_.Advance(kSettle);
    source->Stop();
    auto restarted = Source("boot-1", sink);
    restarted->CatchUp();
    return restarted;
  }

  vigil::testing::TempDir dir_;
  std::string log_;
  FakeClock clock_;
};

TEST_F(KernelLogXidsTest, XidsFromBeforeTheStartAreAppliedOnceToTheirGpu) {
  RecordingSink sink;
  auto source = Source("boot-1", &sink);
  source->CatchUp();
  std::vector<XidEvent> events = sink.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].gpu, 2u);
  EXPECT_EQ(events[0].xid, 79u);
  EXPECT_EQ(events[0].source, XidSource::kKernelLog);
  EXPECT_EQ(events[0].time, clock_.Now() - absl::Seconds(40));
  EXPECT_THAT(events[0].detail, ::testing::HasSubstr("GPU has fallen off the bus."));
  EXPECT_EQ(source->stats().replayed, 1u);
  EXPECT_EQ(source->stats().not_kernel, 1u) << "facility 1 cannot be the driver";
  EXPECT_EQ(source->stats().unknown_bus, 1u);
  EXPECT_EQ(source->stats().sxids, 1u) << "the Severity line is the same SXid";

  // Once the XID has settled (the engine evaluated and persisted it), it is written down:
  // restarted in the same boot, nothing is applied twice.
  RecordingSink again;
  auto restarted = Restarted(std::move(source), &again);
  EXPECT_TRUE(again.events().empty());
  EXPECT_EQ(restarted->stats().already_applied, 1u);

  // A new boot (the log would be new too; here it is the same file): applied afresh.
  RecordingSink rebooted_sink;
  auto rebooted = Source("boot-2", &rebooted_sink);
  rebooted->CatchUp();
  EXPECT_EQ(rebooted_sink.events().size(), 1u);
}

TEST_F(KernelLogXidsTest, NewLinesAreFollowedAfterTheStart) {
  RecordingSink sink;
  auto source = Source("boot-1", &sink);
  source->CatchUp();
  source->Start();
  std::ofstream(log_, std::ios::app)
      << "4,107,99000000,c;NVRM: Xid (PCI:0000:2a:00): 48, pid=77, name=python3, An uncorrectable "
         "double bit error\n";
  ASSERT_TRUE(vigil::testing::Eventually([&] { return sink.events().size() == 2; }));
  const XidEvent event = sink.events()[1];
  EXPECT_EQ(event.gpu, 1u);
  EXPECT_EQ(event.xid, 48u);
  EXPECT_THAT(event.detail, ::testing::HasSubstr("(pid 77 python3)"));
  EXPECT_EQ(source->stats().replayed, 1u) << "only the first was from before the start";
  EXPECT_EQ(event.time, clock_.Now()) << "followed live: timed by its arrival";
  // What was followed is remembered too.
  RecordingSink again;
  auto restarted = Restarted(std::move(source), &again);
  EXPECT_TRUE(again.events().empty());
  EXPECT_EQ(restarted->stats().already_applied, 2u);
}

// The kernel's other lines go to the hook with their time; what a process wrote does not (the
// kernel cannot be impersonated); a line the hook took is applied once, like an XID: a restart
// in the same boot does not hand it again, and one it did not take is offered again.
TEST_F(KernelLogXidsTest, TheKernelsOtherLinesGoToTheHookOnce) {
  std::ofstream(log_, std::ios::app)
      << "3,107,70000000,-;mlx5_core 0000:5e:00.0: poll_health:852:(pid 0): device's health "
         "compromised - reached miss count\n"
         "11,108,70000001,-;mlx5_core 0000:5e:00.0: written by a process\n";
  std::vector<std::pair<std::string, absl::Time>> offered;
  auto take_mlx5 = [&](std::string_view message, absl::Time time) {
    offered.emplace_back(std::string(message), time);
    return message.starts_with("mlx5_core");
  };
  RecordingSink sink;
  auto source = Source("boot-1", &sink, take_mlx5);
  source->CatchUp();
  std::vector<std::string> messages;
  for (const auto& [message, time] : offered) messages.push_back(message);
  EXPECT_EQ(messages, (std::vector<std::string>{
                          "Linux version 6.1.0", "NVRM: GPU at PCI:0000:3b:00: GPU-2",
                          "mlx5_core 0000:5e:00.0: poll_health:852:(pid 0): device's health "
                          "compromised - reached miss count"}));
  EXPECT_EQ(offered.back().second, clock_.Now() - absl::Seconds(30));
  offered.clear();
  clock_.Advance(kSettle);  // settled, then a restart in the same boot
  source->Stop();
  RecordingSink again;
  Source("boot-1", &again, take_mlx5)->CatchUp();
  EXPECT_TRUE(offered.empty()) << "the mlx5 line was taken and settled before the restart";
}

// A crash right after an XID (before it settled: its incident may not be on disk yet) applies
// it again at the restart rather than losing it.
TEST_F(KernelLogXidsTest, AnXidThatHadNotSettledIsAppliedAgainAfterACrash) {
  RecordingSink sink;
  auto source = Source("boot-1", &sink);
  source->CatchUp();
  source->Stop();  // as at a crash: no time has passed
  RecordingSink again;
  auto restarted = Source("boot-1", &again);
  restarted->CatchUp();
  EXPECT_EQ(again.events().size(), 1u);
}

// The driver prints "GPU has fallen off the bus." beside the Xid 79 line
// (akash-network/support#209): one XID 79; the message alone (R570, the probe routine) is one too.
TEST_F(KernelLogXidsTest, TheTwoLinesOfAnXid79AreOneXid) {
  const std::vector<XidEvent> events = CatchUpOn(
      "4,1,5000000,c;NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', "
      "name=<unknown>, GPU has fallen off the bus.\n"
      "3,2,5000010,-;NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.\n"
      "3,3,9000000,-;NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].gpu, 1u);
  EXPECT_EQ(events[1].gpu, 0u);
  EXPECT_EQ(events[1].xid, 79u);
}

TEST_F(KernelLogXidsTest, AnXidInAMigGpuInstanceCarriesTheInstance) {
  const std::vector<XidEvent> events = CatchUpOn(
      "4,1,5000000,-;NVRM: Xid (PCI:0000:18:00 GPU-I:05 GPU-CI:02): 94, "
      "pid=7194, name=python3, Contained: CE User Channel (0x9)\n"
      "4,2,5000001,-;NVRM: Xid (PCI:0000:2a:00): 94, pid=7195, name=python3, "
      "Contained\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].gpu, 0u);
  EXPECT_EQ(events[0].gpu_instance, 5u);
  EXPECT_EQ(events[0].compute_instance, 2u);
  EXPECT_FALSE(events[1].gpu_instance.has_value()) << "a whole GPU's XID names no instance";
}

// The state belongs to one log: a saved log replayed later (its own sequence numbers) is read
// afresh, not skipped because /dev/kmsg's sequences went further.
TEST_F(KernelLogXidsTest, AnotherLogStartsAfresh) {
  RecordingSink sink;
  auto source = Source("boot-1", &sink);
  source->CatchUp();
  clock_.Advance(kSettle);
  source->Stop();
  const std::string other = (dir_.path() / "other").string();
  std::filesystem::copy_file(log_, other);
  log_ = other;
  RecordingSink again;
  auto replay = Source("boot-1", &again);
  replay->CatchUp();
  EXPECT_EQ(again.events().size(), 1u);
}

TEST_F(KernelLogXidsTest, AnUnreadableStateFileMeansApplyingAgainNotFailing) {
  std::ofstream(dir_.path() / "kmsg.state") << "not json";
  RecordingSink sink;
  auto source = Source("boot-1", &sink);
  source->CatchUp();
  EXPECT_EQ(sink.events().size(), 1u);
}

}  // namespace
}  // namespace vigil::kmsg
