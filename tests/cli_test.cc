// End-to-end tests of the real `vigil` binary: the engine as a process, the CLI commands against
// it over both transports, exit codes and one-line errors, signals and restarts.
#include <signal.h>
#include <unistd.h>

#include <map>
#include <set>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One line on stderr, ending in a newline.
void ExpectOneLine(const std::string& err) {
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
}

TEST(CliTest, InfoDiscoveryAndDmonOverBothTransports) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 4);
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();

  auto info = RunCommand({VigilBinary(), "info", "--engine", engine.tcp_address, "--json"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto info_json = nlohmann::json::parse(info.out);
  EXPECT_EQ(info_json["node_name"], "n1");
  EXPECT_EQ(info_json["instance_id"].get<std::string>().size(), 32u);
  EXPECT_EQ(info_json["backend"], "sim");

  auto discovery =
      RunCommand({VigilBinary(), "discovery", "--engine", engine.unix_address, "--json"});
  ASSERT_EQ(discovery.exit_code, 0) << discovery.err;
  const auto gpus = nlohmann::json::parse(discovery.out)["gpus"];
  ASSERT_EQ(gpus.size(), 4u);
  std::set<std::string> uuids;
  for (const auto& gpu : gpus) uuids.insert(gpu["uuid"].get<std::string>());
  EXPECT_EQ(uuids.size(), 4u);

  // Both transports at once, so that they see the same ticks.
  Process over_tcp({VigilBinary(), "dmon", "-e", "DCGM_FI_DEV_GPU_TEMP,155", "-c", "3", "--json",
                    "--engine", engine.tcp_address},
                   dir.path().string());
  Process over_unix({VigilBinary(), "dmon", "-e", "DCGM_FI_DEV_GPU_TEMP,155", "-c", "3", "--json",
                     "--engine", engine.unix_address},
                    dir.path().string());
  ASSERT_EQ(over_tcp.Wait(), 0) << over_tcp.Stderr();
  ASSERT_EQ(over_unix.Wait(), 0) << over_unix.Stderr();
  std::map<uint64_t, nlohmann::json> by_seq;
  for (const std::string& out : {over_tcp.Stdout(), over_unix.Stdout()}) {
    const auto ticks = JsonLines(out);
    ASSERT_EQ(ticks.size(), 3u) << out;
    uint64_t previous = 0;
    for (const auto& tick : ticks) {
      const uint64_t seq = tick["seq"];
      EXPECT_GT(seq, previous);
      previous = seq;
      EXPECT_EQ(tick["instance_id"], info_json["instance_id"]);
      ASSERT_EQ(tick["values"].size(), 8u);  // 4 GPUs x 2 fields
      EXPECT_EQ(tick["values"][0]["field"], "DCGM_FI_DEV_GPU_TEMP");
      EXPECT_EQ(tick["values"][1]["field"], "DCGM_FI_DEV_POWER_USAGE");
      auto [it, inserted] = by_seq.emplace(seq, tick["values"]);
      if (!inserted) {
        EXPECT_EQ(it->second, tick["values"]) << "seq " << seq;
      }
    }
  }
  EXPECT_LE(by_seq.size(), 4u) << "the two clients saw mostly different ticks";
}

TEST(CliTest, DiscoveryListsTheGpuInstancesOfSimulatedMigGpus) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 3,
                       {"--mig", "0:1g.10gb,1g.10gb,2g.20gb", "--mig", "1:3g.40gb,4g.40gb", "--mig",
                        "2:" + std::string("1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,"
                                           "1g.10gb,1g.10gb")});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  auto discovery =
      RunCommand({VigilBinary(), "discovery", "--engine", engine.unix_address, "--json"});
  ASSERT_EQ(discovery.exit_code, 0) << discovery.err;
  const auto gpus = nlohmann::json::parse(discovery.out)["gpus"];
  ASSERT_EQ(gpus.size(), 3u);
  const auto profiles = [&](int gpu) {
    std::vector<std::string> out;
    for (const auto& mig : gpus[gpu]["mig_instances"]) {
      out.push_back(mig["profile"].get<std::string>() + "@" +
                    std::to_string(mig["placement_start"].get<int>()));
    }
    return out;
  };
  EXPECT_TRUE(gpus[0]["mig_mode"].get<bool>());
  EXPECT_THAT(profiles(0), ::testing::ElementsAre("2g.20gb@0", "1g.10gb@2", "1g.10gb@3"));
  EXPECT_THAT(profiles(1), ::testing::ElementsAre("4g.40gb@0", "3g.40gb@4"));
  EXPECT_EQ(gpus[2]["mig_instances"].size(), 7u);
  EXPECT_THAT(gpus[2]["mig_instances"][0]["uuid"].get<std::string>(), HasSubstr("MIG-"));
  auto table = RunCommand({VigilBinary(), "discovery", "--engine", engine.unix_address});
  EXPECT_THAT(table.out, HasSubstr("  1/2  MIG 3g.40gb"));

  // An XID raised in one of GPU 0's instances names it; an instance it does not have is refused.
  auto in_instance = RunCommand({VigilBinary(), "inject", "xid", "--gpu", "0", "--xid", "94",
                                 "--gpu-instance", "2", "--engine", engine.unix_address});
  EXPECT_EQ(in_instance.exit_code, 0) << in_instance.err;
  auto events = RunCommand(
      {VigilBinary(), "events", "--no-follow", "--recent", "10", "--engine", engine.unix_address});
  EXPECT_THAT(events.out, HasSubstr("XID 94 in GPU instance 2 (1g.10gb, MIG-"));
  auto no_such = RunCommand({VigilBinary(), "inject", "xid", "--gpu", "0", "--xid", "94",
                             "--gpu-instance", "9", "--engine", engine.unix_address});
  EXPECT_EQ(no_such.exit_code, 2);
  EXPECT_THAT(no_such.err, HasSubstr("GPU 0 has no GPU instance 9: its instances are 1, 2, 3"));

  // A layout the GPU cannot hold, and --mig on real GPUs, are refused before anything starts.
  auto wont_fit = RunCommand({VigilBinary(), "engine", "--backend", "sim", "--gpus", "1", "--mig",
                              "0:4g.40gb,4g.40gb", "--socket", dir.File("x.sock"), "--listen", "",
                              "--state-dir", dir.File("x")});
  EXPECT_EQ(wont_fit.exit_code, 2);
  EXPECT_THAT(wont_fit.err,
              HasSubstr("--mig for GPU 0: 2 x 4g.40gb: an H100 80GB holds at most 1"));
  auto real =
      RunCommand({VigilBinary(), "engine", "--backend", "nvml", "--mig", "0:1g.10gb", "--socket",
                  dir.File("y.sock"), "--listen", "", "--state-dir", dir.File("y")});
  EXPECT_EQ(real.exit_code, 2);
  EXPECT_THAT(real.err, HasSubstr("apply to --backend sim only"));
}

TEST(CliTest, DmonTextTableLooksLikeDcgmi) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  auto dmon = RunCommand({VigilBinary(), "dmon", "-e", "150,155,191", "-c", "2", "-i", "1",
                          "--engine", engine.unix_address});
  ASSERT_EQ(dmon.exit_code, 0) << dmon.err;
  EXPECT_THAT(dmon.out, HasSubstr("#Entity"));
  EXPECT_THAT(dmon.out, HasSubstr("TMPTR"));
  EXPECT_THAT(dmon.out, HasSubstr("POWER"));
  EXPECT_THAT(dmon.out, HasSubstr("GPU 1"));
  EXPECT_THAT(dmon.out, Not(HasSubstr("GPU 0")));
  EXPECT_THAT(dmon.out, HasSubstr("N/A"));  // fan speed: an SXM board has none
}

TEST(CliTest, SigtermShutsDownCleanlyAndClientsFollowARestart) {
  TempDir dir;
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
  ASSERT_FALSE(engine->tcp_address.empty());
  Process dmon(
      {VigilBinary(), "dmon", "-e", "150", "-c", "0", "--json", "--engine", engine->unix_address},
      dir.path());
  // Wait for the first tick (polling the output of another process).
  ASSERT_TRUE(Eventually([&] { return !dmon.Stdout().empty(); })) << dmon.Stderr();
  const std::string first_instance = JsonLines(dmon.Stdout()).front()["instance_id"];

  engine->process->Signal(SIGTERM);
  EXPECT_EQ(engine->process->Wait(), 0) << engine->process->Stderr();
  EXPECT_THAT(engine->process->Stderr(), HasSubstr("engine stopped"));
  EXPECT_NE(access(engine->socket_path.c_str(), F_OK), 0) << "socket file left behind";
  ASSERT_TRUE(dmon.WaitForStderr("reconnecting"));

  EngineProcess restarted(dir.path(), "n1", 2);
  ASSERT_TRUE(dmon.WaitForStderr("the engine restarted")) << dmon.Stderr();
  const auto lines = JsonLines(dmon.Stdout());
  EXPECT_NE(lines.back()["instance_id"], first_instance);
  dmon.Signal(SIGTERM);
  dmon.Wait();
}

TEST(CliTest, KilledEngineLeavesAStaleSocketTheNextOneReplaces) {
  TempDir dir;
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 1);
  ASSERT_FALSE(engine->tcp_address.empty());
  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  EXPECT_EQ(access(engine->socket_path.c_str(), F_OK), 0);
  EngineProcess next(dir.path(), "n1", 1);
  ASSERT_FALSE(next.tcp_address.empty()) << next.process->Stderr();
  EXPECT_THAT(next.process->Stderr(), HasSubstr("replaced the stale socket file"));
  EXPECT_EQ(RunCommand({VigilBinary(), "info", "--engine", next.unix_address}).exit_code, 0);
}

// An empty value written as manifests write it, `--kmsg=`, is empty — the kernel log off — and
// never takes the next argument as its value.
TEST(CliTest, AnEmptyValueAfterTheEqualsSignNeverSwallowsTheNextFlag) {
  TempDir dir;
  const std::string socket = dir.File("n1.sock");
  Process engine({VigilBinary(), "engine", "--backend", "sim", "--gpus", "1", "--socket", socket,
                  "--listen", "", "--state-dir", dir.File("state"), "--kmsg=", "--node-name", "n1"},
                 dir.path().string());
  ASSERT_TRUE(engine.WaitForStderr("engine ready")) << engine.Stderr();
  const CommandResult info =
      RunCommand({VigilBinary(), "info", "--json", "--engine", "unix://" + socket});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json json = nlohmann::json::parse(info.out);
  EXPECT_EQ(json["node_name"], "n1");
  EXPECT_EQ(json["counters"]["kernel_log"], "off") << info.out;
}

TEST(CliTest, SecondEngineOnTheSameSocketOrPortIsRefused) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 1);
  auto same_socket =
      RunCommand({VigilBinary(), "engine", "--backend", "sim", "--socket", engine.socket_path,
                  "--listen", "", "--state-dir", dir.File("s2")});
  EXPECT_EQ(same_socket.exit_code, 2);
  EXPECT_THAT(same_socket.err, HasSubstr("another engine is already listening"));
  ExpectOneLine(same_socket.err);
  auto same_port =
      RunCommand({VigilBinary(), "engine", "--backend", "sim", "--socket", dir.File("other.sock"),
                  "--listen", engine.tcp_address, "--state-dir", dir.File("s3")});
  EXPECT_EQ(same_port.exit_code, 2);
  EXPECT_THAT(same_port.err, HasSubstr("already in use"));
  ExpectOneLine(same_port.err);
}

TEST(CliTest, NvmlBackendWithoutTheDriverExitsTwoSayingSo) {
  TempDir dir;
  auto result = RunCommand({VigilBinary(), "engine", "--backend", "nvml", "--nvml-library",
                            dir.File("libnvidia-ml.so.1"), "--socket", dir.File("e.sock"),
                            "--state-dir", dir.File("state")});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("is the NVIDIA driver installed"));
  ExpectOneLine(result.err);
}

TEST(CliTest, BadInputGetsOneLineAndExitTwo) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"info", "--bogus"}, "--bogus"},
      {{"dmon", "-e", "DCGM_FI_NOPE", "--engine", engine.unix_address}, "unknown field"},
      {{"dmon", "-e", "150", "-i", "5", "-c", "1", "--engine", engine.unix_address},
       "GPU 5 does not exist"},
      {{"dmon", "-e", "150", "-i", "x", "--engine", engine.unix_address}, "GPU indexes"},
      {{"dmon", "--engine", engine.unix_address}, "--field-ids is required"},
      {{"info", "--engine", "unix://" + dir.File("none.sock")}, "is unreachable"},
      {{"info", "--engine", "localhost"}, "has no port"},
      {{"info", "--engine", engine.unix_address, "--timeout", "soon"}, "--timeout"},
      {{"engine", "--backend", "gpu"}, "--backend"},
      {{"engine", "--backend", "sim", "--gpus", "0"}, "--gpus"},
      {{"engine", "--backend", "sim", "--node-name", "bad name", "--socket", dir.File("x.sock")},
       "--node-name"},
      {{"engine", "--backend", "sim", "--socket", "", "--listen", ""}, "no way to reach"},
      {{"engine", "--backend", "sim", "--config", dir.File("missing.yaml")}, "cannot read"},
      {{"engine", "--backend", "sim", "--state-dir", "/proc/nope"}, "state dir"},
      {{"engine", "--backend", "sim", "--sim-process", "1:4001", "--socket", dir.File("p.sock")},
       "--sim-process '1:4001': not GPU:PID:MEMORY_MIB"},
      {{"engine", "--backend", "sim", "--gpus", "2", "--sim-process", "5:4001:10", "--socket",
        dir.File("p.sock")},
       "there is no GPU 5"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {VigilBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = RunCommand(argv);
    EXPECT_EQ(result.exit_code, 2) << args[0] << " " << expected << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr(expected));
    ExpectOneLine(result.err);
  }
}

TEST(CliTest, ConfigFileErrorsNameTheLine) {
  TempDir dir;
  const std::string config = dir.File("engine.yaml");
  FILE* file = fopen(config.c_str(), "w");
  fputs("sampling:\n  tick_interval: 1s\n  intervals:\n    DCGM_FI_DEV_GPU_TMP: 1s\n", file);
  fclose(file);
  auto result = RunCommand({VigilBinary(), "engine", "--backend", "sim", "--config", config,
                            "--socket", dir.File("e.sock"), "--state-dir", dir.File("state")});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("engine.yaml:4: sampling.intervals.DCGM_FI_DEV_GPU_TMP"));
}

TEST(CliTest, VersionAndHelp) {
  auto version = RunCommand({VigilBinary(), "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.out, HasSubstr("0."));
  for (const char* command : {"engine", "info", "discovery", "dmon"}) {
    auto help = RunCommand({VigilBinary(), command, "--help"});
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_THAT(help.out, HasSubstr("Usage")) << command;
  }
}

}  // namespace
}  // namespace vigil::testing
