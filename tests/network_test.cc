// End-to-end tests of the GPU's network with the real binary: a fake sysfs tree laid out as a
// DGX-style node (8 GPUs at the simulated GPUs' bus ids, each behind a PCIe switch with its rail
// HCA, and a dual-port RoCE HCA on NUMA node 1) given with --sysfs-root. The engine says each port
// and the GPUs it serves at start; a rail's state file turned DOWN fails its GPU's network system
// (the others stay PASS) and back ACTIVE it clears after the recovery window; counters past a
// rule fail or warn with the rule's code; a garbled state file makes the GPU UNKNOWN with one
// warning. A root that does not exist, or an override naming a port the node lacks, is one line
// and exit 2.
#include <fstream>
#include <string>
#include <vector>

#include "daemon.h"
#include "dgx_sysfs.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "network/fake_sysfs.h"
#include "process.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// A config file in `dir` with `network_yaml` as its network: section.
std::string NetworkConfig(const TempDir& dir, const std::string& network_yaml) {
  const std::string path = dir.File("engine.yaml");
  std::ofstream(path) << "network:\n" << network_yaml;
  return path;
}

// Each GPU's network status ("PASS", ...), in GPU order; empty until the engine has ticked.
std::vector<std::string> NetworkStatuses(const EngineProcess& engine, Json* verdict) {
  *verdict = VigilJson({"health", "--json", "--engine", engine.unix_address});
  std::vector<std::string> statuses;
  if (!verdict->is_object() || verdict->value("seq", 0) < 1) return statuses;
  for (const Json& gpu : (*verdict)["gpus"]) {
    statuses.push_back(gpu["systems"].contains("network")
                           ? gpu["systems"]["network"]["status"].get<std::string>()
                           : "absent");
  }
  return statuses;
}

// Whether every GPU's network turns PASS (the engine has ticked and read its ports).
bool AllPassEventually(const EngineProcess& engine, Json* verdict) {
  return Eventually(
      [&] { return NetworkStatuses(engine, verdict) == std::vector<std::string>(8, "PASS"); });
}

// The statuses with GPU `gpu`'s set to `status` and every other PASS.
std::vector<std::string> AllPassBut(uint32_t gpu, const std::string& status) {
  std::vector<std::string> statuses(8, "PASS");
  statuses[gpu] = status;
  return statuses;
}

TEST(NetworkTest, ARailDownFailsItsGpuAloneAndClearsAfterTheRecoveryWindow) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  const std::string config = NetworkConfig(dir, "  state: {fail_after: 0s, recovery_window: 2s}\n");
  EngineProcess engine(dir.path().string(), "n1", 8,
                       {"--sysfs-root", sysfs.root(), "--config", config});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  Json verdict;
  ASSERT_TRUE(AllPassEventually(engine, &verdict)) << verdict.dump();

  sysfs.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/state", "1: DOWN");
  sysfs.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/phys_state", "3: Disabled");
  ASSERT_TRUE(Eventually([&] {
    return NetworkStatuses(engine, &verdict) == AllPassBut(3, "FAIL");
  })) << verdict.dump();
  const Json& incident = verdict["gpus"][3]["systems"]["network"]["incidents"][0];
  EXPECT_EQ(incident["code"], "VIGIL_FR_NET_PORT_DOWN");
  EXPECT_THAT(incident["message"].get<std::string>(),
              HasSubstr("port mlx5_3/1 is DOWN/Disabled since"));
  EXPECT_EQ(verdict["gpus"][3]["status"], "FAIL");
  EXPECT_TRUE(
      engine.process->WaitForStderr("network: port mlx5_3/1 is DOWN/Disabled (was ACTIVE/LinkUp)"));

  sysfs.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/state", "4: ACTIVE");
  sysfs.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/phys_state", "5: LinkUp");
  ASSERT_TRUE(Eventually([&] {
    return NetworkStatuses(engine, &verdict) == AllPassBut(3, "FAIL") &&
           verdict["gpus"][3]["systems"]["network"]["incidents"][0]["message"]
                   .get<std::string>()
                   .find("back ACTIVE/LinkUp since") != std::string::npos;
  })) << verdict.dump();
  ASSERT_TRUE(AllPassEventually(engine, &verdict)) << verdict.dump();
  const std::vector<Json> events =
      JsonLines(Vigil({"events", "--json", "--no-follow", "--engine", engine.unix_address}).out);
  // The network's transitions (a loaded machine may also see other systems' fields go stale).
  std::vector<std::string> transitions;
  std::string every;  // every transition, for a failure's message
  for (const Json& event : events) {
    const std::string message = event.value("message", "");
    if (event["kind"] != "HEALTH_TRANSITION") continue;
    every += message + "\n";
    if (message.find(" network: ") != std::string::npos) transitions.push_back(message);
  }
  ASSERT_EQ(transitions.size(), 2u) << "down and back, nothing else:\n" << every;
  EXPECT_THAT(transitions[0], HasSubstr("GPU 3 ("));
  EXPECT_THAT(transitions[0], HasSubstr("network: PASS -> FAIL: VIGIL_FR_NET_PORT_DOWN"));
  EXPECT_THAT(transitions[1], HasSubstr("network: FAIL -> PASS"));
}

// Every port down at once is the node's: its `nics` system fails (VIGIL_FR_NET_ALL_PORTS_DOWN)
// beside each GPU's network, and passes again as soon as one port is back.
TEST(NetworkTest, EveryPortDownFailsTheNodesNicsUntilOnePortIsBack) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  const std::string config = NetworkConfig(dir, "  state: {fail_after: 0s, recovery_window: 2s}\n");
  EngineProcess engine(dir.path().string(), "n1", 8,
                       {"--sysfs-root", sysfs.root(), "--config", config});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  Json verdict;
  ASSERT_TRUE(AllPassEventually(engine, &verdict)) << verdict.dump();
  EXPECT_EQ(verdict["node"]["systems"]["nics"]["status"], "PASS") << verdict.dump();

  std::vector<std::pair<std::string, int>> ports = {{"mlx5_8", 1}, {"mlx5_8", 2}};
  for (int i = 0; i < 8; ++i) ports.emplace_back(fmt::format("mlx5_{}", i), 1);
  for (const auto& [device, port] : ports) {
    sysfs.Write(FakeSysfs::PortDir(device, port) + "/state", "1: DOWN");
    sysfs.Write(FakeSysfs::PortDir(device, port) + "/phys_state", "3: Disabled");
  }
  ASSERT_TRUE(Eventually([&] {
    return NetworkStatuses(engine, &verdict) == std::vector<std::string>(8, "FAIL") &&
           verdict["node"]["systems"]["nics"]["status"] == "FAIL";
  })) << verdict.dump();
  const Json& incident = verdict["node"]["systems"]["nics"]["incidents"][0];
  EXPECT_EQ(incident["code"], "VIGIL_FR_NET_ALL_PORTS_DOWN");
  EXPECT_THAT(incident["message"].get<std::string>(),
              HasSubstr("every NIC port of the node that was up is down (10 ports: "));
  EXPECT_EQ(verdict["overall"], "FAIL");

  sysfs.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/state", "4: ACTIVE");
  sysfs.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/phys_state", "5: LinkUp");
  ASSERT_TRUE(Eventually([&] {
    NetworkStatuses(engine, &verdict);
    return verdict["node"]["systems"]["nics"]["status"] == "PASS";
  })) << verdict.dump();
  EXPECT_EQ(verdict["gpus"][1]["systems"]["network"]["status"], "FAIL")
      << "the other rails are still down";
}

TEST(NetworkTest, CountersPastARuleFailOrWarnWithItsCode) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  const std::string config = NetworkConfig(dir, "  counter_interval: 1s\n");
  EngineProcess engine(dir.path().string(), "n1", 8,
                       {"--sysfs-root", sysfs.root(), "--config", config});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  Json verdict;
  ASSERT_TRUE(AllPassEventually(engine, &verdict)) << verdict.dump();
  sysfs.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/counters/symbol_error", "121");
  sysfs.Write(FakeSysfs::PortDir("mlx5_6", 1) + "/counters/link_downed", "1");
  std::vector<std::string> expected(8, "PASS");
  expected[0] = "FAIL";
  expected[6] = "WARN";
  ASSERT_TRUE(Eventually([&] { return NetworkStatuses(engine, &verdict) == expected; }))
      << verdict.dump();
  EXPECT_EQ(verdict["gpus"][0]["systems"]["network"]["incidents"][0]["code"],
            "VIGIL_FR_NET_SYMBOL_ERRORS");
  EXPECT_THAT(
      verdict["gpus"][0]["systems"]["network"]["incidents"][0]["message"].get<std::string>(),
      HasSubstr("port mlx5_0/1: symbol_error rose by 121"));
  EXPECT_EQ(verdict["gpus"][6]["systems"]["network"]["incidents"][0]["code"],
            "VIGIL_FR_NET_LINK_DOWNED");
}

TEST(NetworkTest, AGarbledStateFileMakesItsGpuUnknownWithOneWarning) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  EngineProcess engine(dir.path().string(), "n1", 8, {"--sysfs-root", sysfs.root()});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  Json verdict;
  ASSERT_TRUE(AllPassEventually(engine, &verdict)) << verdict.dump();
  sysfs.Write(FakeSysfs::PortDir("mlx5_2", 1) + "/state", "4 ACTIVE");
  ASSERT_TRUE(Eventually([&] {
    return NetworkStatuses(engine, &verdict) == AllPassBut(2, "UNKNOWN");
  })) << verdict.dump();
  EXPECT_THAT(verdict["gpus"][2]["systems"]["network"]["unknown_reason"].get<std::string>(),
              HasSubstr("port mlx5_2/1 cannot be judged: "));
  // Said once, however many reads find it garbled.
  ASSERT_TRUE(Eventually([&] {
    return NetworkStatuses(engine, &verdict) == AllPassBut(2, "UNKNOWN") &&
           verdict.value("seq", 0) >= 4;
  }));
  const std::string log = engine.process->Stderr();
  const std::string said = "network: port mlx5_2/1 cannot be judged";
  EXPECT_EQ(log.find(said), log.rfind(said)) << log;
}

// The mlx5 driver's lines, fed through a kernel-log file to a running engine: a RoCE netdev's
// "Link down" (the shape of the real line in bigstack-oss/cubecos issue 733, "mlx5_core
// 0000:01:00.1 eth1: Link up", at this node's bus id and netdev) warns the GPUs the RoCE ports
// serve; health.c's "device's health compromised" on rail 3's HCA fails GPU 3 with `reboot`.
TEST(NetworkTest, TheDriversKernelLogLinesBecomeIncidentsOfTheirPortsGpus) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  const std::string log = dir.File("kmsg");
  std::ofstream(log) << "6,1,1000,-;Linux version 6.1.0-18-amd64\n";
  EngineProcess engine(dir.path().string(), "n1", 8, {"--sysfs-root", sysfs.root(), "--kmsg", log});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  Json verdict;
  ASSERT_TRUE(AllPassEventually(engine, &verdict)) << verdict.dump();
  std::ofstream(log, std::ios::app)
      << "6,2,9000000,-;mlx5_core 0000:e1:00.0 ens8f0np0: Link down\n"
         "3,3,9100000,-;mlx5_core 0000:5e:00.0: poll_health:852:(pid 0): device's health "
         "compromised - reached miss count\n";
  const std::vector<std::string> expected = {"PASS", "PASS", "PASS", "FAIL",
                                             "WARN", "WARN", "WARN", "WARN"};
  ASSERT_TRUE(Eventually([&] { return NetworkStatuses(engine, &verdict) == expected; }))
      << verdict.dump() << engine.process->Stderr();
  const Json& fatal = verdict["gpus"][3]["systems"]["network"]["incidents"][0];
  EXPECT_EQ(fatal["code"], "VIGIL_FR_NET_NIC_FATAL");
  EXPECT_EQ(fatal["recommended_action"], "reboot") << fatal.dump();
  EXPECT_THAT(fatal["message"].get<std::string>(),
              HasSubstr("port mlx5_3/1: the mlx5 driver logged \"device's health compromised - "
                        "reached miss count\""));
  EXPECT_EQ(verdict["gpus"][4]["systems"]["network"]["incidents"][0]["code"],
            "VIGIL_FR_NET_LINK_DOWN_LOGGED");
}

// The exporter serves the ports as node_exporter's infiniband series, with the GPUs' network
// health; promtool accepts the scrape without a lint on any of them.
TEST(NetworkTest, TheExporterServesThePortsSeriesAndPromtoolAcceptsThem) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  sysfs.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/counters/symbol_error", "7");
  EngineProcess engine(dir.path().string(), "n1", 8, {"--sysfs-root", sysfs.root()});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  HttpDaemon exporter("exporter", dir.path().string(), engine.unix_address,
                      {"--node-name", "node-a"});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  const std::string body = exporter.GetUntil("/metrics", [](const std::string& b) {
    return b.find("node_infiniband_state_id") != std::string::npos;
  });
  EXPECT_THAT(body, HasSubstr("node_infiniband_state_id{device=\"mlx5_3\",port=\"1\"} 4\n"));
  EXPECT_THAT(body,
              HasSubstr("node_infiniband_physical_state_id{device=\"mlx5_8\",port=\"2\"} 5\n"));
  EXPECT_THAT(body, HasSubstr("node_infiniband_rate_bytes_per_second{device=\"mlx5_0\",port=\"1\"} "
                              "50000000000\n"));
  EXPECT_THAT(body, HasSubstr("node_infiniband_rate_bytes_per_second{device=\"mlx5_8\",port=\"1\"} "
                              "25000000000\n"));
  EXPECT_THAT(body,
              HasSubstr("node_infiniband_symbol_error_total{device=\"mlx5_3\",port=\"1\"} 7\n"));
  EXPECT_THAT(body, HasSubstr("vigil_nic_port_info{device=\"mlx5_8\",port=\"2\",link_layer="
                              "\"Ethernet\",netdev=\"ens8f0np0\",pci_bus_id=\"0000:e1:00.0\","
                              "gpus=\"4,5,6,7\",attachment=\"numa-node\"} 1\n"));
  EXPECT_THAT(
      body,
      ::testing::ContainsRegex(
          "vigil_gpu_health_status\\{gpu=\"3\",UUID=\"GPU-[^\"]+\",system=\"network\"\\} 0\n"));
  const std::string scrape = dir.File("scrape.txt");
  std::ofstream(scrape) << body;
  auto promtool = Shell("promtool check metrics < " + scrape);
  EXPECT_TRUE(promtool.exit_code == 0 || promtool.exit_code == 3) << promtool.err << promtool.out;
  for (const char* name : {"node_infiniband", "vigil_nic_port_info", "vigil_gpu_health"}) {
    EXPECT_THAT(promtool.err + promtool.out, ::testing::Not(HasSubstr(name)))
        << "a lint on " << name << ": " << promtool.err << promtool.out;
  }
}

TEST(NetworkTest, AnOverrideOfAPortTheNodeLacksIsOneLineAndExit2) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  const std::string config = NetworkConfig(dir, "  ports: {mlx5_9/1: [0]}\n");
  auto started = Vigil({"engine", "--backend", "sim", "--gpus", "8", "--socket", dir.File("e.sock"),
                        "--listen", "", "--state-dir", dir.File("state"), "--sysfs-root",
                        sysfs.root(), "--config", config});
  EXPECT_EQ(started.exit_code, 2) << started.err;
  const std::string last = started.err.substr(started.err.rfind('\n', started.err.size() - 2) + 1);
  EXPECT_THAT(last, HasSubstr("network.ports names 'mlx5_9/1', which this node does not have "
                              "(its ports: mlx5_0/1, "))
      << started.err;
}

TEST(NetworkTest, TheEngineSaysEachPortAndTheGpusItServes) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  EngineProcess engine(dir.path().string(), "n1", 8, {"--sysfs-root", sysfs.root()});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(engine.process->WaitForStderr("network: 10 NIC port(s) under " + sysfs.root()))
      << engine.process->Stderr();
  const std::string log = engine.process->Stderr();
  for (int i = 0; i < 8; ++i) {
    EXPECT_THAT(log, HasSubstr(fmt::format(
                         "network: port mlx5_{}/1 (InfiniBand, {}) serves GPU {} (pcie-switch)", i,
                         PciFunction(kSimBuses[i] + 1, 0), i)));
  }
  EXPECT_THAT(log, HasSubstr("network: port mlx5_8/2 (Ethernet, 0000:e1:00.0, ens8f0np0) serves "
                             "GPU 4, 5, 6, 7 (numa-node)"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("warning network:")));

  // `vigil discovery` shows the same map, with each port's state.
  const Json found = VigilJson({"discovery", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(found["nic_ports"].size(), 10u) << found.dump();
  for (int i = 0; i < 8; ++i) {
    const Json& port = found["nic_ports"][i];
    EXPECT_EQ(port["name"], fmt::format("mlx5_{}/1", i));
    EXPECT_EQ(port["pci_bus_id"], PciFunction(kSimBuses[i] + 1, 0));
    EXPECT_EQ(port["link_layer"], "InfiniBand");
    EXPECT_EQ(port["gpus"], Json::array({i}));
    EXPECT_EQ(port["attachment"], "pcie-switch");
  }
  EXPECT_EQ(found["nic_ports"][9]["name"], "mlx5_8/2");
  EXPECT_EQ(found["nic_ports"][9]["netdev"], "ens8f0np0");
  EXPECT_EQ(found["nic_ports"][9]["gpus"], Json::array({4, 5, 6, 7}));
  const std::string table = Vigil({"discovery", "--engine", engine.unix_address}).out;
  EXPECT_THAT(table, HasSubstr("10 NIC ports found."));
  ASSERT_TRUE(Eventually([&] {  // the state, once the first tick has read it
    return Vigil({"discovery", "--engine", engine.unix_address}).out.find("ACTIVE/LinkUp") !=
           std::string::npos;
  }));
  const std::string read = Vigil({"discovery", "--engine", engine.unix_address}).out;
  EXPECT_THAT(read, ::testing::ContainsRegex(
                        "mlx5_3/1 +InfiniBand +0000:5e:00.0 +- +ACTIVE/LinkUp +400 Gb/s \\(4X "
                        "NDR\\) +GPU 3 \\(pcie-switch\\)"));
  EXPECT_THAT(read, ::testing::ContainsRegex(
                        "mlx5_8/1 +Ethernet +0000:e1:00.0 +ens8f0np0 +ACTIVE/LinkUp +200 Gb/s "
                        "\\(4X HDR\\) +GPU 4, 5, 6, 7 \\(numa-node\\)"));
}

TEST(NetworkTest, AGarbledPortFileIsOneWarningAndThePortStillListed) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  sysfs.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/link_layer", "Infiniband?");
  EngineProcess engine(dir.path().string(), "n1", 8, {"--sysfs-root", sysfs.root()});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(engine.process->WaitForStderr("network: 10 NIC port(s)")) << engine.process->Stderr();
  const std::string log = engine.process->Stderr();
  EXPECT_THAT(log, HasSubstr("warning network: mlx5_3/1: "));
  EXPECT_THAT(log, HasSubstr("link layer 'Infiniband?' is neither"));
  EXPECT_THAT(log, HasSubstr("network: port mlx5_3/1 (link layer unknown, "));
}

TEST(NetworkTest, ASysfsRootThatDoesNotExistIsOneLineAndExit2) {
  TempDir dir;
  const std::string missing = dir.File("no-such-sys");
  auto started = Vigil({"engine", "--backend", "sim", "--gpus", "2", "--socket", dir.File("e.sock"),
                        "--listen", "", "--state-dir", dir.File("state"), "--sysfs-root", missing});
  EXPECT_EQ(started.exit_code, 2) << started.err;
  EXPECT_THAT(started.err, HasSubstr("vigil engine: --sysfs-root '" + missing +
                                     "' is not a directory: give the sysfs mount"));
  // The refusal is the last line, and one line.
  const std::string last = started.err.substr(started.err.rfind('\n', started.err.size() - 2) + 1);
  EXPECT_THAT(last, ::testing::StartsWith("vigil engine: --sysfs-root")) << started.err;
}

// The simulated node's NIC rails (--sim-nics): discovery shows rail i serving GPU i, and a port's
// state file under STATE_DIR/sim-sysfs turned DOWN fails that GPU's network alone.
TEST(NetworkTest, SimulatedRailsServeTheirGpusAndAPortsFileChangesIt) {
  TempDir dir;
  const std::string config = NetworkConfig(dir, "  state: {fail_after: 0s, recovery_window: 2s}\n");
  EngineProcess engine(dir.path().string(), "n1", 4, {"--sim-nics", "3", "--config", config});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(engine.process->WaitForStderr("sim: 3 NIC rails (mlx5_0 .. mlx5_2) under "))
      << engine.process->Stderr();
  const Json discovery = VigilJson({"discovery", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(discovery["nic_ports"].size(), 3u) << discovery.dump();
  for (uint32_t i = 0; i < 3; ++i) {
    const Json& port = discovery["nic_ports"][i];
    EXPECT_EQ(port["name"], fmt::format("mlx5_{}/1", i));
    EXPECT_EQ(port["gpus"], Json::array({i}));
    EXPECT_EQ(port["attachment"], "pcie-switch");
  }
  Json verdict;
  const auto statuses = [&] { return NetworkStatuses(engine, &verdict); };
  ASSERT_TRUE(Eventually([&] {
    return statuses() == std::vector<std::string>{"PASS", "PASS", "PASS", "PASS"};
  })) << verdict.dump();
  const std::string state =
      dir.File("state-n1/sim-sysfs/" + FakeSysfs::PortDir("mlx5_1", 1) + "/state");
  std::ofstream(state) << "1: DOWN\n";
  ASSERT_TRUE(Eventually([&] {
    return statuses() == std::vector<std::string>{"PASS", "FAIL", "PASS", "PASS"};
  })) << verdict.dump();
}

// `vigil inject field --port` drives a simulated rail's state: GPU 3's network fails alone, the
// port shows as injected in discovery, the audit trail names the port, and a clear brings the
// port's real state back, the GPU passing after the recovery window.
TEST(NetworkTest, AnInjectedPortStateFailsItsGpuAloneAndAClearBringsItBack) {
  TempDir dir;
  const std::string config = NetworkConfig(dir, "  state: {fail_after: 0s, recovery_window: 2s}\n");
  EngineProcess engine(dir.path().string(), "n1", 4, {"--sim-nics", "4", "--config", config});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  Json verdict;
  const auto statuses = [&] { return NetworkStatuses(engine, &verdict); };
  const std::vector<std::string> all_pass(4, "PASS");
  ASSERT_TRUE(Eventually([&] { return statuses() == all_pass; })) << verdict.dump();

  auto injected = Vigil({"inject", "field", "--port", "mlx5_3/1", "--field", "state", "--value",
                         "1", "--for", "5m", "--engine", engine.unix_address});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  EXPECT_THAT(injected.out, HasSubstr("inj-1: NIC port mlx5_3/1 state set to 1"));
  ASSERT_TRUE(Eventually([&] {
    return statuses() == std::vector<std::string>{"PASS", "PASS", "PASS", "FAIL"};
  })) << verdict.dump();
  const Json& incident = verdict["gpus"][3]["systems"]["network"]["incidents"][0];
  EXPECT_EQ(incident["code"], "VIGIL_FR_NET_PORT_DOWN");
  EXPECT_TRUE(incident.value("injected", false)) << incident.dump();
  const Json discovery = VigilJson({"discovery", "--json", "--engine", engine.unix_address});
  EXPECT_EQ(discovery["nic_ports"][3]["injected"], Json::array({"state"})) << discovery.dump();
  EXPECT_EQ(discovery["nic_ports"][2]["injected"], Json::array()) << discovery.dump();
  const Json list = VigilJson({"inject", "list", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(list["injections"].size(), 1u) << list.dump();
  EXPECT_EQ(list["injections"][0]["nic_port"], "mlx5_3/1");
  EXPECT_EQ(list["injections"][0]["field"], "state");
  EXPECT_TRUE(list["injections"][0]["gpu"].is_null());

  auto cleared = Vigil({"inject", "clear", "inj-1", "--engine", engine.unix_address});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  ASSERT_TRUE(Eventually([&] { return statuses() == all_pass; })) << verdict.dump();
  std::string audit;
  for (const Json& event :
       JsonLines(Vigil({"events", "--json", "--no-follow", "--engine", engine.unix_address}).out)) {
    const std::string kind = event["kind"];
    if (kind.rfind("INJECTION_", 0) == 0) audit += kind + " " + event.value("message", "") + "\n";
  }
  EXPECT_THAT(audit, HasSubstr("INJECTION_STARTED inj-1: NIC port mlx5_3/1 state = 1 for 5m"));
  EXPECT_THAT(audit, HasSubstr("INJECTION_CLEARED"));
}

// A port injection the engine cannot carry out is refused with the reason, and nothing starts.
TEST(NetworkTest, BadPortInjectionsAreRefusedWithTheReason) {
  TempDir dir;
  EngineProcess engine(dir.path().string(), "n1", 2, {"--sim-nics", "2"});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(engine.process->WaitForStderr("sim: 2 NIC rails")) << engine.process->Stderr();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--port", "mlx5_7/1", "--field", "state", "--value", "1"},
       "the node has no NIC port mlx5_7/1: its ports are mlx5_0/1, mlx5_1/1"},
      {{"--port", "mlx5_0/1", "--field", "state", "--value", "9"}, "state takes the number"},
      {{"--port", "mlx5_0/1", "--field", "state", "--add", "1"}, "state is not a counter"},
      {{"--port", "mlx5_0/1", "--field", "bogus", "--value", "1"}, "port mlx5_0/1 has no field"},
      {{"--port", "mlx5_0/1", "--gpu", "0", "--field", "state", "--value", "1"},
       "exactly one of --gpu N"},
  };
  for (auto [args, expected] : cases) {
    args.insert(args.begin(), {"inject", "field"});
    args.insert(args.end(), {"--engine", engine.unix_address});
    auto result = Vigil(args);
    EXPECT_EQ(result.exit_code, 2) << expected << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr(expected));
  }
  const Json list = VigilJson({"inject", "list", "--json", "--engine", engine.unix_address});
  EXPECT_TRUE(list["injections"].empty()) << list.dump();

  TempDir bare_dir;
  EngineProcess bare(bare_dir.path().string(), "n2", 1);
  auto no_ports = Vigil({"inject", "field", "--port", "mlx5_0/1", "--field", "state", "--value",
                         "1", "--engine", bare.unix_address});
  EXPECT_EQ(no_ports.exit_code, 2) << no_ports.err;
  EXPECT_THAT(no_ports.err, HasSubstr("this engine reads no NIC ports"));
}

TEST(NetworkTest, SimulatedRailsRefusedWhereTheyCannotBe) {
  TempDir dir;
  const std::vector<std::string> base = {"engine", "--socket",    dir.File("e.sock"), "--listen",
                                         "",       "--state-dir", dir.File("state")};
  const auto run = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return Vigil(args);
  };
  auto too_many = run({"--backend", "sim", "--gpus", "2", "--sim-nics", "3"});
  EXPECT_EQ(too_many.exit_code, 2) << too_many.err;
  EXPECT_THAT(too_many.err, HasSubstr("--sim-nics 3: the simulated node has 2 GPUs, and a rail "
                                      "serves one: use at most 2"));
  auto with_root =
      run({"--backend", "sim", "--sim-nics", "1", "--sysfs-root", dir.path().string()});
  EXPECT_EQ(with_root.exit_code, 2) << with_root.err;
  EXPECT_THAT(with_root.err, HasSubstr("leave out --sysfs-root"));
  auto past_eight = run({"--backend", "sim", "--gpus", "16", "--sim-nics", "9"});
  EXPECT_EQ(past_eight.exit_code, 2) << past_eight.err;
  EXPECT_THAT(past_eight.err, HasSubstr("--sim-nics"));
}

}  // namespace
}  // namespace vigil::testing
