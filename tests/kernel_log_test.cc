// End-to-end tests of XIDs from the kernel log with the real binary: an engine started on a log
// (a file in /dev/kmsg's format) that already holds an XID 79 for GPU 2 reports GPU 2 FAIL in
// its first verdict; restarted on the same log and state dir in the same boot it does not count
// that XID again; a line appended later is followed; a line for a bus id of no GPU changes no
// GPU; an NVSwitch SXid reaches the event stream, the node's nvswitch health system, the health
// check's status and the exporter; what an operator cleared does not come back when the log is
// replayed from the start (its replay state lost). The boot id comes from $VIGIL_BOOT_ID_FILE.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "common/files.h"
#include "daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/journal.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using Json = nlohmann::json;

// The health verdict once the engine has ticked.
Json FirstVerdict(const EngineProcess& engine) {
  Json verdict;
  Eventually([&] {
    verdict = VigilJson({"health", "--json", "--engine", engine.unix_address});
    return verdict.is_object() && verdict.value("seq", 0) >= 1;
  });
  return verdict;
}

TEST(KernelLogTest, AnXidFromBeforeTheStartFailsTheFirstVerdictAndCountsOnce) {
  TempDir dir;
  const std::string log = (dir.path() / "kmsg").string();
  std::ofstream(dir.path() / "boot_id") << "2f0b7c2e-boot-one\n";
  setenv("VIGIL_BOOT_ID_FILE", (dir.path() / "boot_id").c_str(), 1);
  // The simulated GPUs sit at the buses of a DGX H100: GPU 2 at 3a:00, GPU 0 at 18:00.
  std::ofstream(log) << "6,1,1000,-;Linux version 6.1.0-18-amd64\n"
                        "6,2,4000000,-;NVRM: GPU at PCI:0000:3a:00: GPU-whatever\n"
                        "4,3,5000000,c;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', "
                        "name=<unknown>, GPU has fallen off the bus.\n"
                        "4,4,5000100,c;NVRM: Xid (PCI:0000:77:00): 79, a GPU this node does not "
                        "have\n";
  const std::vector<std::string> kmsg = {"--kmsg", log};
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4, kmsg);
  ASSERT_FALSE(engine->unix_address.empty()) << engine->process->Stderr();

  // The first tick's verdict already fails (the engine logs its first verdict).
  EXPECT_TRUE(engine->process->WaitForStderr("health baseline at seq 1: overall FAIL"))
      << engine->process->Stderr();
  const Json first = FirstVerdict(*engine);
  ASSERT_TRUE(first.is_object());
  EXPECT_EQ(first["gpus"][2]["status"], "FAIL") << first.dump();
  EXPECT_EQ(first["gpus"][2]["systems"]["driver"]["status"], "FAIL");
  for (int gpu : {0, 1, 3}) EXPECT_EQ(first["gpus"][gpu]["status"], "PASS") << gpu;
  Json info = VigilJson({"info", "--json", "--engine", engine->unix_address});
  EXPECT_EQ(info["counters"]["xid_events"], 1) << "the line of a GPU it does not have is not one";
  EXPECT_EQ(info["counters"]["kernel_log"], "reading");
  EXPECT_EQ(info["counters"]["kernel_log_xids"], 1);
  EXPECT_EQ(info["counters"]["kernel_log_unknown_gpu"], 1);
  EXPECT_TRUE(engine->process->WaitForStderr("none of this engine's GPUs"));

  // Once the XID has settled (evaluated, its incident persisted) the engine writes it down.
  ASSERT_TRUE(Eventually([&] {
    auto state = ReadFile((dir.path() / "state-n1" / "kmsg.state").string());
    return state.ok() && state->find("\"sequence\":3") != std::string::npos;
  })) << engine->process->Stderr();
  // Restarted (kill -9) on the same log and state dir, same boot: the XID is not applied again;
  // GPU 2 is still FAIL from the persisted incident, not from a second count.
  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4, kmsg);
  ASSERT_FALSE(engine->unix_address.empty()) << engine->process->Stderr();
  const Json again = FirstVerdict(*engine);
  EXPECT_EQ(again["gpus"][2]["status"], "FAIL");
  info = VigilJson({"info", "--json", "--engine", engine->unix_address});
  EXPECT_EQ(info["counters"]["xid_events"], 0);
  EXPECT_TRUE(engine->process->WaitForStderr("1 already applied before a restart"));

  // A line logged now is followed: XID 48 (a double-bit ECC error) on GPU 0.
  std::ofstream(log, std::ios::app)
      << "4,5,9000000,c;NVRM: Xid (PCI:0000:18:00): 48, pid=4242, name=python3, An uncorrectable "
         "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
         "subpartition 0.\n";
  EXPECT_TRUE(Eventually([&] {
    const Json verdict = VigilJson({"health", "--json", "--engine", engine->unix_address});
    return verdict.is_object() && verdict["gpus"][0]["status"] == "FAIL";
  }));
  info = VigilJson({"info", "--json", "--engine", engine->unix_address});
  EXPECT_EQ(info["counters"]["xid_events"], 1);

  // An NVSwitch error (and its Severity line, the same error) reaches the event stream.
  std::ofstream(log, std::ios::app)
      << "3,6,9500000,-;nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM "
         "Fault Up\n"
         "3,7,9500100,-;nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Severity 1 Engine "
         "instance 48 Sub-engine instance 00\n";
  Json sxid;
  EXPECT_TRUE(Eventually([&] {
    for (const Json& event : JsonLines(
             Vigil({"events", "--json", "--no-follow", "--engine", engine->unix_address}).out)) {
      if (event["kind"] == "SXID") sxid = event;
    }
    return !sxid.is_null();
  }));
  EXPECT_EQ(sxid["sxid"]["code"], 20034);
  EXPECT_EQ(sxid["sxid"]["nvswitch"], 1);
  EXPECT_EQ(sxid["sxid"]["pci_bus_id"], "00000000:06:00.0");
  EXPECT_TRUE(sxid["sxid"]["fatal"].get<bool>());
  EXPECT_EQ(sxid["sxid"]["link"], 48);
  EXPECT_EQ(sxid["gpu"], -1);
  int sxids = 0;
  for (const Json& event : JsonLines(
           Vigil({"events", "--json", "--no-follow", "--engine", engine->unix_address}).out)) {
    sxids += event["kind"] == "SXID";
  }
  EXPECT_EQ(sxids, 1) << "the Severity line is the same error";
  // And the exporter counts it.
  HttpDaemon exporter("exporter", dir.path(), engine->unix_address, {"--node-name", "n1"});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  EXPECT_THAT(exporter.GetUntil("/metrics",
                                [](const std::string& body) {
                                  return body.find("vigil_nvswitch_sxid_events_total{") !=
                                         std::string::npos;
                                }),
              ::testing::HasSubstr("vigil_nvswitch_sxid_events_total{nvswitch=\"1\",pci_bus_id="
                                   "\"00000000:06:00.0\",sxid=\"20034\",severity=\"fatal\"} 1\n"));
  // A fatal SXid fails the node's nvswitch system; the GPUs themselves are as they were.
  Json node_failed;
  ASSERT_TRUE(Eventually([&] {
    node_failed = VigilJson({"health", "--json", "--engine", engine->unix_address});
    return node_failed.is_object() &&
           node_failed["node"]["systems"]["nvswitch"]["status"] == "FAIL";
  })) << node_failed.dump();
  ASSERT_EQ(node_failed["node"]["systems"]["nvswitch"]["incidents"].size(), 1u);
  EXPECT_EQ(node_failed["node"]["systems"]["nvswitch"]["incidents"][0]["code"],
            "DCGM_FR_NVSWITCH_FATAL_ERROR");
  EXPECT_EQ(node_failed["gpus"][1]["status"], "PASS");
  EXPECT_THAT(exporter.GetUntil("/metrics",
                                [](const std::string& body) {
                                  return body.find(
                                             "vigil_node_health_status{system=\"nvswitch\"} "
                                             "20") != std::string::npos;
                                }),
              ::testing::HasSubstr("vigil_node_health_status{system=\"nvswitch\"} 20\n"));
  HttpDaemon healthcheck("healthcheck", dir.path(), engine->unix_address, {"--node-name", "n1"});
  ASSERT_GT(healthcheck.port(), 0) << healthcheck.process().Stderr();
  const Json status =
      Json::parse(healthcheck.GetUntil("/status",
                                       [](const std::string& body) {
                                         return body.find("\"node_systems\"") != std::string::npos;
                                       }),
                  nullptr, false);
  EXPECT_EQ(status["status"], "FAIL") << status.dump();
  EXPECT_EQ(status["node_systems"]["systems"]["nvswitch"], "FAIL");
  ASSERT_EQ(status["node_systems"]["incidents"].size(), 1u);
  EXPECT_THAT(status["node_systems"]["incidents"][0]["message"].get<std::string>(),
              ::testing::HasSubstr("SXid 20034"));

  // The operator clears GPU 0 and the node; then the replay state is lost (the state dir's
  // kmsg.state removed) and the engine restarts on the same log: every line is read again, but
  // what was cleared does not come back. GPU 2's XID 79 was never cleared: it still fails.
  EXPECT_EQ(Vigil({"health", "clear", "--gpu", "0", "--engine", engine->unix_address}).exit_code,
            0);
  const CommandResult cleared =
      Vigil({"health", "clear", "--node", "--engine", engine->unix_address});
  EXPECT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_THAT(cleared.out, ::testing::HasSubstr("Cleared 1 incident(s) on the node"));
  EXPECT_THAT(cleared.out, ::testing::HasSubstr("The node is now PASS"));
  engine->process->Signal(SIGTERM);
  engine->process->Wait();
  ASSERT_EQ(::unlink((dir.path() / "state-n1" / "kmsg.state").c_str()), 0);
  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4, kmsg);
  ASSERT_FALSE(engine->unix_address.empty()) << engine->process->Stderr();
  const Json replayed = FirstVerdict(*engine);
  EXPECT_EQ(replayed["gpus"][0]["status"], "PASS") << replayed.dump();
  EXPECT_EQ(replayed["node"]["systems"]["nvswitch"]["status"], "PASS");
  EXPECT_EQ(replayed["gpus"][2]["status"], "FAIL");
  EXPECT_TRUE(engine->process->WaitForStderr("before the last `vigil health clear`"))
      << engine->process->Stderr();
  unsetenv("VIGIL_BOOT_ID_FILE");
}

// Killed before the XID settled (within kSettle of applying it, so the replay state does not yet
// name it), a restarted engine reads the XID again — and finds it already counted by the
// persisted incident: one XID 79 event in all, GPU 2 FAIL with a count of one.
TEST(KernelLogTest, AnEngineKilledRightAfterAnXidDoesNotCountItAgain) {
  TempDir dir;
  const std::string log = (dir.path() / "kmsg").string();
  std::ofstream(dir.path() / "boot_id") << "5d1e0b7a-boot-two\n";
  setenv("VIGIL_BOOT_ID_FILE", (dir.path() / "boot_id").c_str(), 1);
  std::ofstream(log) << "6,1,1000,-;Linux version 6.1.0-18-amd64\n"
                        "4,2,5000000,c;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', "
                        "name=<unknown>, GPU has fallen off the bus.\n";
  const std::vector<std::string> kmsg = {"--kmsg", log};
  auto xid_events = [](const EngineProcess& engine) {
    int count = 0;
    for (const Json& event : JsonLines(
             Vigil({"events", "--json", "--no-follow", "--engine", engine.unix_address}).out)) {
      count += event["kind"] == "XID";
    }
    return count;
  };
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4, kmsg);
  ASSERT_FALSE(engine->unix_address.empty()) << engine->process->Stderr();
  EXPECT_EQ(FirstVerdict(*engine)["gpus"][2]["status"], "FAIL");
  EXPECT_EQ(xid_events(*engine), 1);
  // The incident is on disk; the replay state is not (it waits for the XID to settle).
  ASSERT_TRUE(Eventually([&] {
    auto persisted = ReadFile((dir.path() / "state-n1" / "health.log").string());
    return persisted.ok() && persisted->find("\"log_sequence\":2") != std::string::npos;
  }));
  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  EXPECT_FALSE(ReadFile((dir.path() / "state-n1" / "kmsg.state").string()).ok())
      << "killed before the XID settled: the test no longer shows the restart reading it again";

  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4, kmsg);
  ASSERT_FALSE(engine->unix_address.empty()) << engine->process->Stderr();
  const Json again = FirstVerdict(*engine);
  EXPECT_EQ(again["gpus"][2]["status"], "FAIL");
  EXPECT_EQ(again["gpus"][2]["systems"]["driver"]["incidents"][0]["count"], 1) << again.dump();
  EXPECT_EQ(xid_events(*engine), 0);
  EXPECT_TRUE(engine->process->WaitForStderr("already counted before a restart"))
      << engine->process->Stderr();
  unsetenv("VIGIL_BOOT_ID_FILE");
}

// As shipped on a runc node the engine may not open /dev/kmsg: it reads the kernel's messages
// from the systemd journal (a journal file written by systemd's own tool), and says so.
TEST(KernelLogTest, WithTheKernelLogClosedTheJournalsXidFailsTheFirstVerdict) {
  TempDir dir;
  const std::string boot_id = "6c0d5f4e-1b2a-4c3d-8e9f-0a1b2c3d4e5f";
  std::ofstream(dir.path() / "boot_id") << boot_id << "\n";
  setenv("VIGIL_BOOT_ID_FILE", (dir.path() / "boot_id").c_str(), 1);
  const std::string journal = (dir.path() / "journal").string();
  ASSERT_TRUE(
      AppendJournal(journal, {KernelEntry(boot_id,
                                          "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', "
                                          "name=<unknown>, GPU has fallen off the bus.",
                                          5'000'000)})
          .ok());
  auto engine = std::make_unique<EngineProcess>(
      dir.path(), "n1", 4,
      std::vector<std::string>{"--kmsg", (dir.path() / "kmsg-closed").string(), "--journal",
                               journal});
  ASSERT_FALSE(engine->unix_address.empty()) << engine->process->Stderr();
  EXPECT_TRUE(engine->process->WaitForStderr("health baseline at seq 1: overall FAIL"))
      << engine->process->Stderr();
  const Json first = FirstVerdict(*engine);
  EXPECT_EQ(first["gpus"][2]["systems"]["driver"]["status"], "FAIL") << first.dump();
  const Json info = VigilJson({"info", "--json", "--engine", engine->unix_address});
  EXPECT_EQ(info["counters"]["kernel_log"], "reading");
  EXPECT_EQ(info["counters"]["kernel_log_source"], "journal " + journal);
  EXPECT_EQ(info["counters"]["kernel_log_xids"], 1);
  EXPECT_THAT(Vigil({"info", "--engine", engine->unix_address}).out,
              ::testing::HasSubstr("reading (journal " + journal + ")"));
  unsetenv("VIGIL_BOOT_ID_FILE");
}

TEST(KernelLogTest, AnAbsentLogIsAWarningNotAFailure) {
  TempDir dir;
  auto engine = std::make_unique<EngineProcess>(
      dir.path(), "n1", 2, std::vector<std::string>{"--kmsg", (dir.path() / "none").string()});
  ASSERT_FALSE(engine->unix_address.empty()) << engine->process->Stderr();
  EXPECT_THAT(engine->process->Stderr(), ::testing::HasSubstr("cannot read the kernel log"));
  // The GPUs are judged as ever; the node's nvswitch system cannot be: never PASS unseen.
  const Json verdict = FirstVerdict(*engine);
  for (const Json& gpu : verdict["gpus"]) EXPECT_EQ(gpu["status"], "PASS") << verdict.dump();
  EXPECT_EQ(verdict["node"]["systems"]["nvswitch"]["status"], "UNKNOWN");
  EXPECT_THAT(verdict["node"]["systems"]["nvswitch"]["unknown_reason"].get<std::string>(),
              ::testing::HasSubstr("the kernel log is absent"));
  EXPECT_EQ(verdict["overall"], "UNKNOWN");
  const Json info = VigilJson({"info", "--json", "--engine", engine->unix_address});
  EXPECT_EQ(info["counters"]["kernel_log"], "absent");
}

}  // namespace
}  // namespace vigil::testing
