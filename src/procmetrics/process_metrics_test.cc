// Tests of the process collector over a fake /proc: each file's values, a file missing or
// malformed leaving its series out with the reason, client_golang's names, order and types, and
// this process's own stats moving as it works.
#include "procmetrics/process_metrics.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace vigil::procmetrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class FakeProc {
 public:
  FakeProc() {
    std::filesystem::create_directories(root() + "/self/fd");
    std::filesystem::create_directories(root() + "/self/net");
    // The command name holds a ") " and spaces, as a process may name itself.
    Write("self/stat",
          "4242 (vigil ) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 125 0 0 20 0 9 0 "
          "360000 734003200 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n");
    Write("stat", "cpu  1 2 3 4\nbtime 1796332095\nprocesses 100\n");
    Write("self/limits",
          "Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max open files            1048576              1048576              files     \n"
          "Max address space         unlimited            unlimited            bytes     \n");
    Write("self/net/netstat",
          "TcpExt: SyncookiesSent\nTcpExt: 0\n"
          "IpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 41271630718 41096183454\n");
    for (const char* fd : {"0", "1", "2", "7"}) Write(std::string("self/fd/") + fd, "");
  }
  std::string root() const { return dir_.path().string(); }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_.File(name)) << text;
  }

 private:
  testing::TempDir dir_;
};

TEST(ProcessMetricsTest, EachFileGivesItsSeriesAsClientGolangWritesThem) {
  FakeProc proc;
  const ProcessStats stats = ReadProcessStats(proc.root(), 100, 4096);
  EXPECT_TRUE(stats.errors.empty()) << stats.errors[0];
  EXPECT_DOUBLE_EQ(*stats.cpu_seconds, 3.75);  // (250 + 125) ticks at 100 Hz
  EXPECT_DOUBLE_EQ(*stats.start_time_seconds, 1796332095 + 3600.0);
  EXPECT_EQ(*stats.virtual_memory_bytes, 734003200u);
  EXPECT_EQ(*stats.resident_memory_bytes, 2048u * 4096u);
  EXPECT_EQ(*stats.open_fds, 4u);
  EXPECT_EQ(*stats.max_fds, 1048576u);
  EXPECT_EQ(*stats.virtual_memory_max_bytes, 18446744073709551615u);
  EXPECT_EQ(*stats.network_receive_bytes, 41271630718u);
  EXPECT_EQ(*stats.network_transmit_bytes, 41096183454u);

  std::string text;
  AppendProcessMetrics(stats, &text);
  EXPECT_EQ(text,
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\n"
            "process_cpu_seconds_total 3.75\n"
            "# HELP process_max_fds Maximum number of open file descriptors.\n"
            "# TYPE process_max_fds gauge\n"
            "process_max_fds 1048576\n"
            "# HELP process_network_receive_bytes_total Number of bytes received by the process "
            "over the network.\n"
            "# TYPE process_network_receive_bytes_total counter\n"
            "process_network_receive_bytes_total 41271630718\n"
            "# HELP process_network_transmit_bytes_total Number of bytes sent by the process over "
            "the network.\n"
            "# TYPE process_network_transmit_bytes_total counter\n"
            "process_network_transmit_bytes_total 41096183454\n"
            "# HELP process_open_fds Number of open file descriptors.\n"
            "# TYPE process_open_fds gauge\n"
            "process_open_fds 4\n"
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            "process_resident_memory_bytes 8388608\n"
            "# HELP process_start_time_seconds Start time of the process since unix epoch in "
            "seconds.\n"
            "# TYPE process_start_time_seconds gauge\n"
            "process_start_time_seconds 1796335695.00\n"
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
            "# TYPE process_virtual_memory_bytes gauge\n"
            "process_virtual_memory_bytes 734003200\n"
            "# HELP process_virtual_memory_max_bytes Maximum amount of virtual memory available in "
            "bytes.\n"
            "# TYPE process_virtual_memory_max_bytes gauge\n"
            "process_virtual_memory_max_bytes 18446744073709551615\n");
}

TEST(ProcessMetricsTest, AFileThatCannotBeReadLeavesItsSeriesOutAndSaysWhy) {
  FakeProc proc;
  std::filesystem::remove(proc.root() + "/self/net/netstat");
  proc.Write("self/stat", "4242 (vigil) S 1 2 3\n");
  proc.Write("self/limits", "Limit Soft Hard Units\nMax open files lots lots files\n");
  const ProcessStats stats = ReadProcessStats(proc.root(), 100, 4096);
  ASSERT_EQ(stats.errors.size(), 3u);
  EXPECT_THAT(stats.errors[0].message(), HasSubstr("self/stat: fields 14, 15, 22, 23 and 24"));
  EXPECT_THAT(stats.errors[1].message(), HasSubstr("self/limits: no soft limit"));
  EXPECT_THAT(stats.errors[2].message(), HasSubstr("cannot read"));
  EXPECT_EQ(*stats.open_fds, 4u);
  std::string text;
  AppendProcessMetrics(stats, &text);
  EXPECT_THAT(text, HasSubstr("process_open_fds 4\n"));
  for (const char* missing : {"process_cpu_seconds_total", "process_max_fds",
                              "process_network_receive_bytes_total", "process_start_time"}) {
    EXPECT_THAT(text, Not(HasSubstr(missing))) << "never a made-up value";
  }
}

TEST(ProcessMetricsTest, ThisProcessesStatsMoveAsItWorks) {
  const ProcessStats before = ReadOwnProcessStats();
  ASSERT_TRUE(before.errors.empty()) << before.errors[0];
  std::vector<std::ofstream> files;
  testing::TempDir dir;
  for (int i = 0; i < 8; ++i) files.emplace_back(dir.File(std::to_string(i)));
  volatile uint64_t spin = 0;
  for (uint64_t i = 0; i < 200'000'000 && ReadOwnProcessStats().cpu_seconds == before.cpu_seconds;
       i += 1'000'000) {
    for (int j = 0; j < 1'000'000; ++j) spin = spin + j;
  }
  const ProcessStats after = ReadOwnProcessStats();
  EXPECT_EQ(*after.open_fds, *before.open_fds + 8);
  EXPECT_GT(*after.cpu_seconds, *before.cpu_seconds);
  EXPECT_GT(*after.resident_memory_bytes, 0u);
  EXPECT_EQ(*after.start_time_seconds, *before.start_time_seconds);
}

}  // namespace
}  // namespace vigil::procmetrics
