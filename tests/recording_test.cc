// End-to-end tests of the flight recorder with the real binary: an XID 79 injected into a running
// engine makes a recording in its state dir, `vigil recordings` lists it and `vigil history`
// prints it from the file after the engine is killed (no engine running), as CSV and JSON; bad
// input to both commands is one line and a non-zero exit.
#include <signal.h>

#include <fstream>
#include <iterator>
#include <regex>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/eventually.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RecordingTest, AnXid79IsRecordedAndReadBackWithNoEngineRunning) {
  TempDir dir;
  const std::string config = dir.File("engine.yaml");
  std::ofstream(config) << "flight_recorder:\n  window: 1m\n  after: 2s\n";
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2,
                                                std::vector<std::string>{"--config", config});
  const std::string recordings = dir.path().string() + "/state-n1/recordings";
  // A few seconds of telemetry, then the fault.
  ASSERT_TRUE(Eventually([&] {
    auto info = RunCommand({VigilBinary(), "info", "--json", "--engine", engine->unix_address});
    return info.exit_code == 0 && nlohmann::json::parse(info.out).value("seq", 0) >= 3;
  }));
  ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", "1", "--xid", "79", "--engine",
                        engine->unix_address})
                .exit_code,
            0);
  nlohmann::json listed;
  ASSERT_TRUE(Eventually(
      [&] {
        auto list = RunCommand({VigilBinary(), "recordings", "--json", "--dir", recordings});
        if (list.exit_code != 0) return false;
        listed = nlohmann::json::parse(list.out);
        return listed.size() == 1 && listed[0]["complete"] == true;
      },
      absl::Seconds(15)));
  EXPECT_EQ(listed[0]["gpu"], 1);
  EXPECT_THAT(listed[0]["summary"].get<std::string>(), HasSubstr("XID 79"));
  const std::string id = listed[0]["id"];
  engine->process->Signal(SIGKILL);
  engine.reset();

  // No engine: the file is read directly.
  auto csv = RunCommand({VigilBinary(), "history", "--recording", id, "--dir", recordings,
                         "--field", "DCGM_FI_DEV_POWER_USAGE", "--csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_THAT(csv.out, HasSubstr("time,seq,field_id,field,status,injected,value\n"));
  EXPECT_THAT(csv.out, HasSubstr(",155,DCGM_FI_DEV_POWER_USAGE,ok,0,"));
  EXPECT_GE(std::count(csv.out.begin(), csv.out.end(), '\n'), 4) << csv.out;
  auto json = RunCommand(
      {VigilBinary(), "history", "--recording-file", recordings + "/" + id + ".vrec", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_EQ(parsed["gpu"], 1);
  EXPECT_TRUE(parsed["complete"]);
  EXPECT_GT(parsed["series"].size(), 20u);
  bool xid_seen = false;
  for (const nlohmann::json& series : parsed["series"]) {
    if (series["field_id"] != 230) continue;
    for (const nlohmann::json& sample : series["samples"]) xid_seen |= sample["value"] == 79;
  }
  EXPECT_TRUE(xid_seen) << "the XID itself is in the time after";

  // The incident report of that recording, rendered by a real browser (headless Chromium): the
  // page loads without a console error and its charts are drawn.
  const std::string html = dir.File("report.html");
  auto report =
      RunCommand({VigilBinary(), "report", "--recording", id, "--dir", recordings, "-o", html});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string chromium_dir = dir.File("chromium");
  auto browse = [&](const std::string& what) {
    return RunCommand({"/usr/bin/timeout", "90", "/usr/bin/chromium", "--headless", "--no-sandbox",
                       "--disable-gpu", "--user-data-dir=" + chromium_dir,
                       "--enable-logging=stderr", "--v=0", "--window-size=1200,3000", what,
                       "file://" + html});
  };
  auto dom = browse("--dump-dom");
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  EXPECT_THAT(dom.out, HasSubstr("turned FAIL"));
  EXPECT_THAT(dom.out, HasSubstr("DCGM_FR_FALLEN_OFF_BUS"));
  EXPECT_THAT(dom.err, Not(HasSubstr("CONSOLE"))) << "the page logged to its console";
  // Every chart's paths are drawn from data: "M x y L x y ...", never empty.
  std::regex path("<path class=\"series\" data-field=\"(\\d+)\" d=\"M[0-9.]+ [0-9.]+ L");
  const auto drawn = std::distance(std::sregex_iterator(dom.out.begin(), dom.out.end(), path),
                                   std::sregex_iterator());
  EXPECT_GE(drawn, 5) << dom.out.substr(0, 2000);
  EXPECT_EQ(dom.out.find("d=\"\""), std::string::npos) << "an empty path";
  EXPECT_THAT(dom.out, HasSubstr("class=\"fault\""));
  const std::string shot = dir.File("report.png");
  auto screenshot = browse("--screenshot=" + shot);
  ASSERT_EQ(screenshot.exit_code, 0) << screenshot.err;
  std::ifstream png(shot, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(png)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 20'000u) << "a page with charts is more than a blank image";
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  // The same data as JSON.
  auto data = RunCommand(
      {VigilBinary(), "report", "--recording-file", recordings + "/" + id + ".vrec", "--json"});
  ASSERT_EQ(data.exit_code, 0) << data.err;
  const nlohmann::json report_json = nlohmann::json::parse(data.out);
  EXPECT_EQ(report_json["gpu"]["index"], 1);
  EXPECT_GE(report_json["charts"].size(), 4u);
  EXPECT_EQ(report_json["charts"][0]["title"], "XID") << "the failing system's evidence first";
}

TEST(RecordingTest, BadInputIsOneLineAndAnError) {
  TempDir dir;
  std::ofstream(dir.File("broken.vrec")) << "VIGILREC 1 10 0 0\nnot json..";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"history", "--recording-file", dir.File("missing.vrec")}, "missing.vrec"},
      {{"history", "--recording-file", dir.File("broken.vrec")}, "not a valid flight recording"},
      {{"history", "--recording", "x", "--recording-file", "y"}, "choose one"},
      {{"history", "--recording-file", dir.File("broken.vrec"), "--csv", "--json"}, "choose one"},
      {{"history", "--gpu", "0", "--field", "NO_SUCH_FIELD", "--engine", "unix:///nowhere"},
       "--field"},
      {{"history"}, "--gpu N is required"},
      {{"history", "--gpu", "0", "--since", "-5m", "--engine", "unix:///nowhere"}, "--since"},
      {{"recordings", "--dir", dir.path().string()}, "not a valid flight recording"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {VigilBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = RunCommand(argv);
    EXPECT_NE(result.exit_code, 0) << expected;
    EXPECT_THAT(result.err, HasSubstr(expected));
  }
}

}  // namespace
}  // namespace vigil::testing
