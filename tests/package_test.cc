// Tests of the Debian package and the systemd units: CPack builds the .deb from this build, it
// holds the binary, both units, the default config (as a conffile) and the example scenarios,
// the packaged binary runs, and the units' own ExecStart command lines start the engine and
// `vigil node` with the packaged config (on the simulated backend, in a temporary directory).
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "process.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;

std::string BuildDir() { return std::filesystem::path(VigilBinary()).parent_path().string(); }

// The stdout of a shell command that must succeed.
std::string OutputOf(const std::string& command) {
  auto result = Shell(command, absl::Seconds(120));
  EXPECT_EQ(result.exit_code, 0) << command << ": " << result.err;
  return result.out;
}

// Builds the package into `dir` and unpacks it into dir/root; returns the .deb's path.
std::string BuildAndUnpack(const TempDir& dir) {
  OutputOf("cd " + dir.path().string() + " && cpack -G DEB --config " + BuildDir() +
           "/CPackConfig.cmake -B " + dir.path().string() + " >/dev/null");
  std::string deb;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".deb") deb = entry.path().string();
  }
  EXPECT_FALSE(deb.empty()) << "no .deb in " << dir.path();
  if (!deb.empty()) OutputOf("dpkg-deb -x " + deb + " " + dir.File("root"));
  return deb;
}

// The ExecStart of a unit file, continuation lines joined.
std::string ExecStart(const std::string& unit_path) {
  std::ifstream in(unit_path);
  std::string line, command;
  bool in_exec = false;
  while (std::getline(in, line)) {
    if (line.rfind("ExecStart=", 0) == 0) {
      in_exec = true;
      line = line.substr(strlen("ExecStart="));
    } else if (!in_exec) {
      continue;
    }
    const bool continued = !line.empty() && line.back() == '\\';
    command += continued ? line.substr(0, line.size() - 1) : line;
    if (!continued) break;
  }
  return command;
}

TEST(PackageTest, TheDebHoldsWhatAnInstallNeedsItsBinaryRunsAndItsUnitsStart) {
  TempDir dir;
  const std::string deb = BuildAndUnpack(dir);
  ASSERT_FALSE(deb.empty());
  EXPECT_THAT(deb, HasSubstr("vigil_0.1.0_"));
  const std::string contents = OutputOf("dpkg-deb --contents " + deb);
  for (const char* file :
       {"./usr/bin/vigil", "./usr/lib/systemd/system/vigil-engine.service",
        "./usr/lib/systemd/system/vigil-node.service", "./etc/vigil/engine.yaml",
        "./usr/share/vigil/scenarios/xid79-fallen-off-bus.yaml", "./usr/share/doc/vigil/README.md",
        "./usr/share/doc/vigil/docs/nvml.md"}) {
    EXPECT_THAT(contents, HasSubstr(file));
  }
  EXPECT_EQ(OutputOf("dpkg-deb --ctrl-tarfile " + deb + " | tar -xO ./conffiles"),
            "/etc/vigil/engine.yaml\n");
  const std::string control = OutputOf("dpkg-deb --field " + deb + " Package Depends");
  EXPECT_THAT(control, HasSubstr("Package: vigil"));
  EXPECT_THAT(control, HasSubstr("libgrpc++1.51"));  // found by dpkg-shlibdeps

  auto version = RunCommand({dir.File("root/usr/bin/vigil"), "--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_THAT(version.out, HasSubstr("0.1.0"));

  // The units' own command lines start with the packaged config. (One test, one cpack run:
  // two runs at once would share the build tree's install step.)
  const std::string root = dir.File("root");
  for (const char* unit : {"vigil-engine.service", "vigil-node.service"}) {
    SCOPED_TRACE(unit);
    std::string command = ExecStart(root + "/usr/lib/systemd/system/" + unit);
    ASSERT_THAT(command, HasSubstr("/usr/bin/vigil"));
    // The same command, pointed into the unpacked package and the temp dir, on simulated GPUs
    // and ports of its own.
    command = std::regex_replace(command, std::regex("/usr/bin/vigil"), root + "/usr/bin/vigil");
    command = std::regex_replace(command, std::regex("/etc/vigil"), root + "/etc/vigil");
    command = std::regex_replace(command, std::regex("/run/vigil"), dir.path().string());
    command = std::regex_replace(command, std::regex("/var/lib/vigil"), dir.File("state"));
    command = std::regex_replace(command, std::regex("--backend nvml"), "--backend sim --gpus 2");
    command = std::regex_replace(command, std::regex("127\\.0\\.0\\.1:5555"), "127.0.0.1:0");
    command = std::regex_replace(command, std::regex(" :940[01]"), " 127.0.0.1:0");
    Process process({"/bin/sh", "-c", "exec " + command}, dir.path());
    EXPECT_TRUE(process.WaitForStderr("engine ready")) << command << "\n" << process.Stderr();
    process.Signal(SIGTERM);
    EXPECT_EQ(process.Wait(), 0) << process.Stderr();
    std::filesystem::remove(dir.path().string() + "/vigil.sock");
  }
}

}  // namespace
}  // namespace vigil::testing
