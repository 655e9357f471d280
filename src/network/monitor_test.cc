// Tests of the network source on a fake sysfs tree: 8 InfiniBand rails (one per GPU) and a
// dual-port RoCE HCA serving GPUs 4-7. A port's state file changed to DOWN is reported for its
// GPU alone at the next state read; counters are read on their own interval; a garbled file makes
// its GPUs UNKNOWN and is said once, and once again when it is readable.
#include "network/monitor.h"

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "network/fake_sysfs.h"
#include "testing/log_capture.h"
#include "testing/temp_dir.h"

namespace vigil::network {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using vigil::testing::FakeSysfs;
using vigil::testing::TempDir;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 8; ++i) {
      const std::string bus_id = fmt::format("0000:{:02x}:00.0", 0x20 + i);
      sysfs_.AddPciFunction({"pci0000:00", bus_id}, 0);
      sysfs_.AddHca(fmt::format("mlx5_{}", i), bus_id, {FakeSysfs::Port{}});
    }
    sysfs_.AddPciFunction({"pci0000:00", "0000:e1:00.0"}, 1);
    FakeSysfs::Port roce{.rate = "200 Gb/sec (4X HDR)", .link_layer = "Ethernet"};
    sysfs_.AddHca("mlx5_8", "0000:e1:00.0", {roce, roce}, "ens8f0np0");
    policy_.fail_after = absl::ZeroDuration();
    policy_.recovery_window = absl::Seconds(30);
    MakeMonitor(/*roce_gpus=*/{4, 5, 6, 7});
  }

  // The monitor over the tree: rail i serves GPU i, the RoCE HCA's ports `roce_gpus`.
  void MakeMonitor(std::vector<uint32_t> roce_gpus) {
    auto reader = SysfsPorts::Open(Env::Default(), sysfs_.root());
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<MappedPort> ports;
    for (NicPort& port : reader->Discover().ports) {
      MappedPort& mapped = ports.emplace_back();
      mapped.attachment.gpus =
          port.device == "mlx5_8"
              ? roce_gpus
              : std::vector<uint32_t>{static_cast<uint32_t>(port.device[5] - '0')};
      mapped.port = std::move(port);
    }
    ASSERT_EQ(ports.size(), 10u);
    monitor_.emplace(*std::move(reader), std::move(ports), policy_, 8);
  }

  // Judges at `now`: the GPUs' report (the node's is kept in node_).
  SourceReport JudgeGpus(absl::Time now) {
    std::vector<SourceReport> reports = monitor_->Judge(now);
    EXPECT_EQ(reports.size(), 2u);
    EXPECT_EQ(reports.at(1).system, HealthSystem::kNics);
    node_ = reports.at(1);
    return reports.at(0);
  }

  // The node's findings in the last judgement: "WARN nics.all_down".
  std::vector<std::string> NodeFindings() const {
    std::vector<std::string> out;
    for (const SourceFinding& finding : node_.findings) {
      out.push_back(fmt::format("{} {}", HealthStatusName(finding.status), finding.key));
    }
    return out;
  }

  void SetState(const std::string& device, int port, const char* state, const char* phys) {
    sysfs_.Write(FakeSysfs::PortDir(device, port) + "/state", state);
    sysfs_.Write(FakeSysfs::PortDir(device, port) + "/phys_state", phys);
  }

  // The GPUs whose network the report fails or warns, with the finding's key.
  static std::vector<std::string> Findings(const SourceReport& report) {
    std::vector<std::string> out;
    for (const SourceFinding& finding : report.findings) {
      for (uint32_t gpu : finding.gpus) {
        out.push_back(
            fmt::format("GPU {} {} {}", gpu, HealthStatusName(finding.status), finding.key));
      }
    }
    return out;
  }

  TempDir dir_;
  FakeSysfs sysfs_{dir_.File("sys")};
  NetworkPolicy policy_ = DefaultNetworkPolicy();
  std::optional<NetworkMonitor> monitor_;
  SourceReport node_;
};

TEST_F(MonitorTest, APortDownFailsItsGpuAloneAtTheNextStateReadAndClearsAfterRecovery) {
  SourceReport report = JudgeGpus(kT0);
  EXPECT_EQ(report.system, HealthSystem::kNetwork);
  EXPECT_THAT(report.findings, IsEmpty());
  EXPECT_EQ(report.unknown, std::vector<std::string>(8, ""));

  sysfs_.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/state", "1: DOWN");
  sysfs_.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/phys_state", "3: Disabled");
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Milliseconds(500))), IsEmpty())
      << "the state is read every second";
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(1))),
              ElementsAre("GPU 3 FAIL network.state.mlx5_3/1"));

  sysfs_.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/state", "4: ACTIVE");
  sysfs_.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/phys_state", "5: LinkUp");
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(2))),
              ElementsAre("GPU 3 FAIL network.state.mlx5_3/1"))
      << "until it stayed up for the recovery window";
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(32))), IsEmpty());
}

TEST_F(MonitorTest, ARoCEPortsFindingsAreThoseOfEveryGpuItServes) {
  JudgeGpus(kT0);
  sysfs_.Write(FakeSysfs::PortDir("mlx5_8", 2) + "/state", "1: DOWN");
  sysfs_.Write(FakeSysfs::PortDir("mlx5_8", 2) + "/phys_state", "3: Disabled");
  EXPECT_THAT(
      Findings(JudgeGpus(kT0 + absl::Seconds(1))),
      ElementsAre("GPU 4 FAIL network.state.mlx5_8/2", "GPU 5 FAIL network.state.mlx5_8/2",
                  "GPU 6 FAIL network.state.mlx5_8/2", "GPU 7 FAIL network.state.mlx5_8/2"));
}

TEST_F(MonitorTest, CountersAreReadOnTheirOwnInterval) {
  JudgeGpus(kT0);
  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/counters/link_downed", "1");
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(29))), IsEmpty());
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(30))),
              ElementsAre("GPU 0 WARN network.link_downed.mlx5_0/1"));
  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/counters/symbol_error", "500");
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(60))),
              ElementsAre("GPU 0 FAIL network.symbol_error_ber.mlx5_0/1",
                          "GPU 0 WARN network.symbol_error_burst.mlx5_0/1",
                          "GPU 0 WARN network.link_downed.mlx5_0/1"));
}

TEST_F(MonitorTest, AGarbledFileMakesItsGpusUnknownAndIsSaidOnce) {
  testing::LogCapture log;
  JudgeGpus(kT0);
  sysfs_.Write(FakeSysfs::PortDir("mlx5_5", 1) + "/state", "banana");
  for (int second = 1; second <= 3; ++second) {
    const SourceReport report = JudgeGpus(kT0 + absl::Seconds(second));
    EXPECT_THAT(report.unknown[5], HasSubstr("port mlx5_5/1 cannot be judged: ")) << second;
    EXPECT_EQ(report.unknown[4], "");
    EXPECT_THAT(report.findings, IsEmpty()) << "never judged from what it could not read";
  }
  EXPECT_EQ(log.Count("network: port mlx5_5/1 cannot be judged"), 1u);
  sysfs_.Write(FakeSysfs::PortDir("mlx5_5", 1) + "/state", "4: ACTIVE");
  EXPECT_EQ(JudgeGpus(kT0 + absl::Seconds(4)).unknown[5], "");
  EXPECT_EQ(log.Count("network: port mlx5_5/1 is readable again"), 1u);
}

// The driver's kernel-log lines are judged for the ports of their HCA (their netdev's, for a
// netdev line): a fatal one fails for good with `reboot`, a link down warns for the hour; a line
// about no port of the node is said once.
TEST_F(MonitorTest, TheDriversLinesAreJudgedForThePortsOfTheirHca) {
  testing::LogCapture log;
  JudgeGpus(kT0);
  monitor_->OnKernelLine("mlx5_core 0000:e1:00.0 ens8f0np0: Link down", kT0);
  monitor_->OnKernelLine(
      "mlx5_core 0000:23:00.0: poll_health:852:(pid 0): device's health compromised - reached "
      "miss count",
      kT0);
  monitor_->OnKernelLine("mlx5_core 0000:99:00.0: Port module event: module 0, Cable unplugged",
                         kT0);
  monitor_->OnKernelLine("mlx5_core 0000:99:00.0: Port module event: module 0, Cable unplugged",
                         kT0);
  monitor_->OnKernelLine("NVRM: something else entirely", kT0);
  const SourceReport report = JudgeGpus(kT0 + absl::Milliseconds(100));
  // This tree's RoCE HCA runs both its ports over ens8f0np0 (each port's first GID names it).
  std::vector<std::string> expected = {"GPU 3 FAIL network.log.fatal.mlx5_3/1"};
  for (const char* port : {"mlx5_8/1", "mlx5_8/2"}) {
    for (int gpu = 4; gpu < 8; ++gpu) {
      expected.push_back(fmt::format("GPU {} WARN network.log.link-down.{}", gpu, port));
    }
  }
  EXPECT_EQ(Findings(report), expected);
  monitor_->OnKernelLine("mlx5_core 0000:e1:00.0 ens9f0np0: Link down", kT0);
  EXPECT_EQ(Findings(JudgeGpus(kT0 + absl::Milliseconds(200))), expected)
      << "another netdev of the HCA is no port of this node's";
  EXPECT_EQ(report.findings[0].code, "VIGIL_FR_NET_NIC_FATAL");
  EXPECT_EQ(report.findings[0].recommended, RecommendedAction::kReboot);
  EXPECT_TRUE(report.findings[0].sticky);
  EXPECT_EQ(log.Count("for 0000:99:00.0, which none of the node's ports is on"), 1u);
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Hours(1))),
              ElementsAre("GPU 3 FAIL network.log.fatal.mlx5_3/1"))
      << "the link-down warning held its hour";
}

// Every port down at once is the node's failure, not eight GPUs' (the node's `nics` system):
// WARN while some port is within its grace, FAIL once every port's own finding fails; it ends as
// a port comes back, while the GPUs keep their recovery windows.
TEST_F(MonitorTest, EveryPortDownIsTheNodesFailureAndEndsAsOnePortIsBack) {
  policy_.fail_after = absl::Seconds(10);
  MakeMonitor({4, 5, 6, 7});
  JudgeGpus(kT0);
  EXPECT_THAT(node_.findings, IsEmpty());
  EXPECT_EQ(node_.unknown, std::vector<std::string>{""});
  for (int i = 0; i < 8; ++i) SetState(fmt::format("mlx5_{}", i), 1, "1: DOWN", "3: Disabled");
  JudgeGpus(kT0 + absl::Seconds(1));
  EXPECT_THAT(NodeFindings(), IsEmpty()) << "the RoCE ports are still up";
  SetState("mlx5_8", 1, "1: DOWN", "3: Disabled");
  SetState("mlx5_8", 2, "1: DOWN", "3: Disabled");
  JudgeGpus(kT0 + absl::Seconds(2));
  EXPECT_THAT(NodeFindings(), ElementsAre("WARN nics.all_down")) << "within the grace";
  JudgeGpus(kT0 + absl::Seconds(11));
  EXPECT_THAT(NodeFindings(), ElementsAre("WARN nics.all_down")) << "the RoCE ports' grace";
  const SourceReport gpus = JudgeGpus(kT0 + absl::Seconds(12));
  ASSERT_THAT(NodeFindings(), ElementsAre("FAIL nics.all_down"));
  EXPECT_EQ(node_.findings[0].code, "VIGIL_FR_NET_ALL_PORTS_DOWN");
  EXPECT_FALSE(node_.findings[0].sticky);
  EXPECT_THAT(node_.findings[0].message,
              HasSubstr("(10 ports: mlx5_0/1 DOWN/Disabled, mlx5_1/1 DOWN/Disabled"));
  EXPECT_EQ(gpus.findings.size(), 10u) << "each port keeps its own finding, for its GPUs";

  SetState("mlx5_8", 2, "4: ACTIVE", "5: LinkUp");
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(13))),
              ::testing::Contains(HasSubstr("GPU 7 FAIL network.state.mlx5_8/2")))
      << "the port's own recovery window still holds for its GPUs";
  EXPECT_THAT(NodeFindings(), IsEmpty()) << "the node is reachable again";
}

// A port that serves no GPU is judged for the node: its findings and its unreadable files are
// the node's `nics` system's, and no GPU's.
TEST_F(MonitorTest, APortThatServesNoGpuIsJudgedForTheNode) {
  MakeMonitor({});
  JudgeGpus(kT0);
  SetState("mlx5_8", 2, "1: DOWN", "3: Disabled");
  const SourceReport gpus = JudgeGpus(kT0 + absl::Seconds(1));
  EXPECT_THAT(gpus.findings, IsEmpty());
  EXPECT_THAT(NodeFindings(), ElementsAre("FAIL network.state.mlx5_8/2"));
  EXPECT_THAT(node_.findings[0].gpus, IsEmpty());
  sysfs_.Write(FakeSysfs::PortDir("mlx5_8", 1) + "/state", "banana");
  const SourceReport unread = JudgeGpus(kT0 + absl::Seconds(2));
  EXPECT_THAT(node_.unknown.at(0), HasSubstr("port mlx5_8/1 cannot be judged"));
  EXPECT_EQ(unread.unknown, std::vector<std::string>(8, ""));
}

TEST_F(MonitorTest, AnInjectedStateIsJudgedAtOnceFlaggedAndEndsWithTheInjection) {
  JudgeGpus(kT0);
  const PortFieldInjection down{.id = "inj-1", .port = "mlx5_3/1", .field = "state", .value = 1};
  EXPECT_TRUE(monitor_->CheckPortInjection(down).ok());
  monitor_->SetPortInjections({down});
  const SourceReport report = JudgeGpus(kT0 + absl::Milliseconds(100));  // not a state read due
  EXPECT_THAT(Findings(report), ElementsAre("GPU 3 FAIL network.state.mlx5_3/1"));
  EXPECT_TRUE(report.findings.at(0).injected);
  EXPECT_THAT(monitor_->NicPorts()[3].injected, ElementsAre("state"));
  EXPECT_THAT(monitor_->NicPorts()[2].injected, IsEmpty());

  monitor_->SetPortInjections({});
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Milliseconds(200))),
              ElementsAre("GPU 3 FAIL network.state.mlx5_3/1"))
      << "the real state is back, and must stay up for the recovery window";
  EXPECT_THAT(monitor_->NicPorts()[3].injected, IsEmpty());
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(31))), IsEmpty());
}

TEST_F(MonitorTest, AnInjectedCounterIsAddedToTheRealOneAndHeldWhenItEnds) {
  JudgeGpus(kT0);
  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/counters/link_downed", "1");
  const PortFieldInjection add{.id = "inj-1", .port = "mlx5_0/1", .field = "link_downed", .add = 1};
  monitor_->SetPortInjections({add});
  EXPECT_THAT(Findings(JudgeGpus(kT0 + absl::Seconds(1))),
              ElementsAre("GPU 0 WARN network.link_downed.mlx5_0/1"));
  EXPECT_EQ(monitor_->NicPorts()[0].counters.at("link_downed"), 2u);
  EXPECT_THAT(monitor_->NicPorts()[0].injected, ElementsAre("link_downed"));

  monitor_->SetPortInjections({});
  JudgeGpus(kT0 + absl::Seconds(2));
  EXPECT_EQ(monitor_->NicPorts()[0].counters.at("link_downed"), 2u)
      << "an ended injection is held, not a counter going backwards";
  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/counters/link_downed", "3");
  JudgeGpus(kT0 + absl::Seconds(32));
  EXPECT_EQ(monitor_->NicPorts()[0].counters.at("link_downed"), 3u);
  EXPECT_THAT(monitor_->NicPorts()[0].injected, IsEmpty());
}

TEST_F(MonitorTest, APortInjectionIsCheckedAgainstThePort) {
  JudgeGpus(kT0);
  EXPECT_TRUE(absl::IsNotFound(monitor_->CheckPortInjection(
      {.id = "inj-1", .port = "mlx5_9/1", .field = "state", .value = 1})));
  EXPECT_TRUE(absl::IsInvalidArgument(monitor_->CheckPortInjection(
      {.id = "inj-1", .port = "mlx5_0/1", .field = "nope", .value = 1})));
}

TEST_F(MonitorTest, PortsShowsEachPortWithItsGpusAndLastState) {
  JudgeGpus(kT0);
  const std::vector<MappedPort> ports = monitor_->Ports();
  ASSERT_EQ(ports.size(), 10u);
  EXPECT_EQ(ports[3].port.Name(), "mlx5_3/1");
  EXPECT_THAT(ports[3].attachment.gpus, ElementsAre(3u));
  EXPECT_EQ(ports[3].port.state, PortState::kActive);
  EXPECT_EQ(ports[9].port.Name(), "mlx5_8/2");
  const std::vector<NicPortEntity> entities = monitor_->NicPorts();
  ASSERT_EQ(entities.size(), 10u);
  EXPECT_EQ(entities[9], (NicPortEntity{.name = "mlx5_8/2",
                                        .pci_bus_id = "0000:e1:00.0",
                                        .link_layer = "Ethernet",
                                        .netdev = "ens8f0np0",
                                        .gpus = {4, 5, 6, 7},
                                        .attachment = "none",
                                        .state = "ACTIVE",
                                        .phys_state = "LinkUp",
                                        .rate_gbps = 200,
                                        .lanes = 4,
                                        .speed = "HDR",
                                        .state_id = 4,
                                        .phys_state_id = 5,
                                        .counters = {{"symbol_error", 0},
                                                     {"link_downed", 0},
                                                     {"link_error_recovery", 0},
                                                     {"port_rcv_errors", 0},
                                                     {"local_link_integrity_errors", 0},
                                                     {"excessive_buffer_overrun_errors", 0},
                                                     {"out_of_buffer", 0}}}));
}

}  // namespace
}  // namespace vigil::network
