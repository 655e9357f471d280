// End-to-end tests of the nvml backend: the real `vigil engine --backend nvml` loads the fake
// libnvidia-ml.so.1 (tests/fake_nvml) through the same dlopen path as on a GPU node, and the
// tests script the fake while the engine runs: discovery, values, unsupported fields, an older
// driver's missing symbols, a GPU lost mid-run, a hung call, XIDs, and failures to start.
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "absl/time/clock.h"
#include "daemon.h"
#include "fake_nvml/script.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kFakeDir = FakeNvmlDir();
const std::string kCurrentDriver = kFakeDir + "/current/libnvidia-ml.so.1";
const std::string kOldDriver = kFakeDir + "/old/libnvidia-ml.so.1";

// Without the host's kernel log: its XIDs (on a GPU host) would meet the fake's GPUs.
std::vector<std::string> NvmlArgs(const std::string& library = kCurrentDriver) {
  return {"--backend", "nvml", "--nvml-library", library, "--kmsg", ""};
}

// The values of GPU `gpu` in one dmon tick, by field ID; *seq gets that tick's seq.
std::map<int, json> Values(const EngineProcess& engine, int gpu, const std::string& fields,
                           uint64_t* seq = nullptr) {
  auto dmon = Vigil({"dmon", "-e", fields, "-i", std::to_string(gpu), "-c", "1", "--json",
                     "--engine", engine.unix_address});
  EXPECT_EQ(dmon.exit_code, 0) << dmon.err;
  std::map<int, json> values;
  const auto ticks = JsonLines(dmon.out);
  if (ticks.empty()) return values;
  if (seq != nullptr) *seq = ticks.back()["seq"].get<uint64_t>();
  for (const json& value : ticks.back()["values"]) values[value["field_id"].get<int>()] = value;
  return values;
}

// Whether `text` shows in the engine's recent events within Eventually's time.
bool EventuallyInEvents(const EngineProcess& engine, const std::string& text) {
  return Eventually([&] {
    auto events =
        Vigil({"events", "--recent", "50", "--no-follow", "--engine", engine.unix_address});
    return events.out.find(text) != std::string::npos;
  });
}

// A reset command that records what it was given, as a site's reset script would be configured.
std::string WriteResetScript(const TempDir& dir, const std::string& record) {
  const std::string path = dir.File("reset.sh");
  std::ofstream(path) << "#!/bin/sh\necho \"$1 $2\" >> " << record << "\necho GPU reset ok\n";
  chmod(path.c_str(), 0755);
  return path;
}

json Health(const EngineProcess& engine) {
  auto health = Vigil({"health", "--json", "--engine", engine.unix_address});
  return json::parse(health.out, nullptr, false);
}

TEST(NvmlTest, ServesTheFakesGpusFoundThroughLdLibraryPath) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  // As an operator would run it: the library found by the loader, no flag.
  setenv("LD_LIBRARY_PATH", (kFakeDir + "/current").c_str(), 1);
  EngineProcess engine(dir.path(), "n1", {"--backend", "nvml"}, {});
  unsetenv("LD_LIBRARY_PATH");
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();

  auto discovery = Vigil({"discovery", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(discovery.exit_code, 0) << discovery.err;
  const json gpus = json::parse(discovery.out)["gpus"];
  ASSERT_EQ(gpus.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(gpus[i]["uuid"], fake.gpu(i)["uuid"]);
    EXPECT_EQ(gpus[i]["name"], "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(gpus[i]["pci_bus_id"], fake.gpu(i)["pci_bus_id"]);
    EXPECT_EQ(gpus[i]["serial"], fake.gpu(i)["serial"]);
    EXPECT_EQ(gpus[i]["driver_version"], "580.82.07");
    EXPECT_EQ(gpus[i]["memory_total_mib"], 81559);
    EXPECT_EQ(gpus[i]["device"], "nvidia" + std::to_string(i));
  }
  auto text = Vigil({"discovery", "--engine", engine.unix_address});
  EXPECT_THAT(text.out, HasSubstr("GPU-00000000-0000-0000-0000-000000000003"));
  auto info = Vigil({"info", "--json", "--engine", engine.unix_address});
  EXPECT_EQ(json::parse(info.out)["backend"], "nvml");
  // The operator can see the read deadline the engine applies.
  EXPECT_THAT(engine.process->Stderr(), HasSubstr("gpu_read_timeout=500ms"));
}

TEST(NvmlTest, ValuesUnitsAndUnsupportedFields) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  // Two ticks, so GPM has the pair of samples its ratios need.
  std::map<int, json> v;
  ASSERT_TRUE(Eventually([&] {
    v = Values(engine, 2,
               "150,155,156,140,252,253,251,203,204,112,191,310,202,449,1002,1009,"
               "1523,1507,84,300,237,238,100,54");
    return v.count(1002) && v[1002]["status"] == "ok";
  }));
  EXPECT_EQ(v[150]["value"], 42);                        // °C
  EXPECT_DOUBLE_EQ(v[155]["value"].get<double>(), 302);  // mW → W
  EXPECT_EQ(v[156]["value"], 5'000'000);                 // mJ, batched field 83
  EXPECT_EQ(v[140]["value"], 48);                        // memory temperature, field 82
  EXPECT_EQ(v[252]["value"], 42 * 1024);                 // MiB
  EXPECT_EQ(v[253]["value"], 512);
  EXPECT_EQ(v[251]["value"], 81559 - 42 * 1024 - 512);
  EXPECT_EQ(v[203]["value"], 87);
  EXPECT_EQ(v[204]["value"], 41);
  EXPECT_EQ(v[112]["value"], 0);
  EXPECT_EQ(v[310]["value"], 0);
  EXPECT_EQ(v[449]["value"], 0);  // NVLink MB/s: the data counters do not move
  EXPECT_DOUBLE_EQ(v[1002]["value"].get<double>(), 0.5);  // GPM percent → ratio
  EXPECT_EQ(v[1009]["value"], 100 * 1024 * 1024);         // GPM MiB/s → B/s
  EXPECT_EQ(v[1523]["value"], 0);
  EXPECT_EQ(v[1507]["value"], 0);
  EXPECT_EQ(v[84]["value"], 1);
  EXPECT_EQ(v[300]["value"], 1);
  EXPECT_EQ(v[237]["value"], 5);
  EXPECT_EQ(v[238]["value"], 16);
  EXPECT_EQ(v[100]["value"], 1980);
  EXPECT_EQ(v[54]["value"], fake.gpu(2)["uuid"]);
  EXPECT_EQ(v[191]["status"], "not_supported");  // no fan on SXM

  // A value the driver changes shows on a later tick.
  fake.gpu(2)["values"]["temperature"] = 71;
  fake.Write();
  EXPECT_TRUE(Eventually([&] { return Values(engine, 2, "150")[150]["value"] == 71; }));

  // NVML's own errors per call: NO_PERMISSION and UNKNOWN are per field, not per GPU.
  fake.gpu(2)["errors"] = {{"nvmlDeviceGetPowerUsage", 4}, {"nvmlDeviceGetTemperatureV", 999}};
  fake.Write();
  EXPECT_TRUE(Eventually([&] {
    auto now = Values(engine, 2, "155,150,203");
    return now[155]["status"] == "no_permission" && now[150]["status"] == "read_error" &&
           now[203]["status"] == "ok";
  }));
  EXPECT_TRUE(engine.process->WaitForStderr("Insufficient Permissions"));
}

// NVML's known quirks, as the fake reproduces them, and what the backend answers (DCGM guards
// against the same in DcgmCacheManager.cpp): GPM answering success with NaN, ECC counters
// answered with values never set while ECC is off, a field typed as a double where an integer
// is expected, a temperature no GPU reaches, and the deprecated temperature call.
TEST(NvmlTest, TheDriversKnownQuirksAreHandled) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  fake.gpu(0)["gpm"]["20"] = nullptr;         // PCIe TX bytes per second: NaN
  fake.gpu(1)["values"]["ecc_mode"] = 0;      // ECC off
  fake.gpu(3)["fields"]["82"] = 4294967295u;  // memory temperature: a wrapped unsigned
  // NVML 13 deprecates nvmlDeviceGetTemperature: a driver that has its successor is read
  // through it.
  fake.gpu(0)["errors"] = {{"nvmlDeviceGetTemperature", 3}};
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  std::map<int, json> gpm;
  ASSERT_TRUE(Eventually([&] {
    gpm = Values(engine, 0, "1002,1009");
    return gpm.count(1002) && gpm[1002]["status"] == "ok";  // two GPM samples taken
  }));
  EXPECT_EQ(gpm[1009]["status"], "no_data") << "NaN is no value, never -9223372036854775808";
  const std::map<int, json> ecc_off = Values(engine, 1, "310,311,312,313,140");
  for (int field : {310, 311, 312, 313}) {
    EXPECT_EQ(ecc_off.at(field)["status"], "not_supported") << field;
  }
  const std::map<int, json> ecc_on = Values(engine, 0, "310");
  EXPECT_EQ(ecc_on.at(310)["status"], "ok");
  EXPECT_EQ(Values(engine, 0, "150")[150]["value"], 40);
  // NVLink throughput as DCGM defines it: every link's data counters (asked with scopeId
  // UINT_MAX; the fake refuses another scope), the rate between two ticks in KiB/s / 1000.
  // 5,000,000 KiB/s on each of TX and RX is 10,000 MB/s.
  fake.gpu(1)["fields"]["138"] = {{"per_second", 5'000'000}};
  fake.gpu(1)["fields"]["139"] = {{"per_second", 5'000'000}};
  fake.Write();
  json nvlink;
  // (The tick that sees the script change sees the counters jump from their old values.)
  EXPECT_TRUE(Eventually([&] {
    nvlink = Values(engine, 1, "449")[449];
    return nvlink["status"] == "ok" && std::abs(nvlink["value"].get<double>() - 10'000) < 100;
  })) << nvlink.dump();
  EXPECT_EQ(Values(engine, 3, "140")[140]["status"], "read_error");
  EXPECT_TRUE(engine.process->WaitForStderr("ignored as implausible"));
}

// Drivers that label an integer a double (NVML bug 2032468 for the ECC counters, nvbugs/4300930
// for memory temperature on r545) are read as DCGM reads them: by the type the field has. Before,
// the volatile DBE read 0 (no FAIL) and memory temperature 0 °C.
TEST(NvmlTest, ValuesTheDriverMislabelsAreReadAsDcgmReadsThem) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
  fake.gpu(1)["fields"]["4"] = {{"mislabelled", 2}};    // volatile DBE: 2
  fake.gpu(1)["fields"]["82"] = {{"mislabelled", 48}};  // memory temperature: 48 °C
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  std::map<int, json> v;
  ASSERT_TRUE(Eventually([&] {
    v = Values(engine, 1, "311,140");
    return v.count(311) && v[311]["status"] == "ok";
  }));
  EXPECT_EQ(v[311]["value"], 2);
  EXPECT_EQ(v[140]["value"], 48);
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][1]["status"] == "FAIL"; }));
  const json memory = Health(engine)["gpus"][1]["systems"]["memory"];
  ASSERT_FALSE(memory["incidents"].empty()) << memory.dump();
  EXPECT_EQ(memory["incidents"][0]["code"], "DCGM_FR_VOLATILE_DBE_DETECTED");
}

// A GPU this process may not open (NO_PERMISSION: a container's cgroup hides its device node) is
// left out as DCGM leaves it out; it used to be reported lost (FAIL, reboot). The others are
// numbered from 0, and a reset names NVML's index.
TEST(NvmlTest, AGpuThisProcessMayNotOpenIsLeftOutNotFailed) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 3);
  fake.gpu(0)["open_error"] = 4;
  fake.Write();
  const std::string record = dir.File("resets");
  EngineProcess engine(dir.path(), "n1", NvmlArgs(),
                       {"--gpu-reset-command", WriteResetScript(dir, record) + " {uuid} {index}"});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  auto discovery = Vigil({"discovery", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(discovery.exit_code, 0) << discovery.err;
  const json gpus = json::parse(discovery.out)["gpus"];
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]["index"], 0);
  EXPECT_EQ(gpus[0]["uuid"], fake.gpu(1)["uuid"]);
  EXPECT_EQ(gpus[1]["uuid"], fake.gpu(2)["uuid"]);
  ASSERT_TRUE(Eventually([&] {
    const json health = Health(engine);
    return health["gpus"].size() == 2 && health["gpus"][0]["status"] == "PASS" &&
           health["gpus"][1]["status"] == "PASS";
  }));
  EXPECT_THAT(engine.process->Stderr(), HasSubstr("NVML GPU 0: this process may not open it"));
  auto reset = Vigil({"reset-gpu", "--gpu", "1", "--engine", engine.unix_address});
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  std::string said;
  std::getline(std::ifstream(record), said);
  EXPECT_EQ(said, fake.gpu(2)["uuid"].get<std::string>() + " 2")
      << "NVML's index, for nvidia-smi -i";

  // With every GPU hidden, the engine says so and exits 2.
  TempDir none;
  FakeNvmlScript hidden(none.File("fake-nvml.json"), 2);
  hidden.gpu(0)["open_error"] = 4;
  hidden.gpu(1)["open_error"] = 4;
  hidden.Write();
  auto refused = Vigil({"engine", "--backend", "nvml", "--nvml-library", kCurrentDriver, "--kmsg",
                        "", "--socket", none.File("s"), "--listen", "127.0.0.1:0"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("NVML lists 2 GPUs but this process may open none of them"));
  setenv("FAKE_NVML_CONFIG", dir.File("fake-nvml.json").c_str(), 1);
}

// NVML_ERROR_RESET_REQUIRED answers every call on a GPU the driver serves again only after a
// reset: a FAIL that asks for the reset (gpud: "GPU requires reset"), where every system used to
// read UNKNOWN. A driver that predates a field id answers it INVALID_ARGUMENT per value: not
// supported (the recovery action's system used to stay UNKNOWN for good). NVLink counters stamped
// 0 are timed by the read, as DCGM times them (their rate used to stay 0).
TEST(NvmlTest, ResetRequiredUnknownFieldIdsAndZeroTimestamps) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 3);
  fake.gpu(1)["unknown_field_ids"] = {230};
  fake.gpu(2)["zero_timestamps"] = true;
  fake.gpu(2)["fields"]["138"] = {{"per_second", 5'000'000}};
  fake.gpu(2)["fields"]["139"] = {{"per_second", 5'000'000}};
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(Eventually([&] {
    const json health = Health(engine);
    return health["gpus"].size() == 3 && health["gpus"][1]["status"] == "PASS";
  }));
  EXPECT_EQ(Health(engine)["gpus"][1]["systems"]["driver"]["status"], "PASS");
  EXPECT_EQ(Values(engine, 1, "1523")[1523]["status"], "not_supported");
  json nvlink;
  EXPECT_TRUE(Eventually([&] {
    nvlink = Values(engine, 2, "449")[449];
    return nvlink["status"] == "ok" && std::abs(nvlink["value"].get<double>() - 10'000) < 100;
  })) << nvlink.dump();

  fake.gpu(0)["reset_required"] = true;
  fake.Write();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][0]["status"] == "FAIL"; }));
  const json driver = Health(engine)["gpus"][0]["systems"]["driver"];
  ASSERT_FALSE(driver["incidents"].empty()) << driver.dump();
  EXPECT_EQ(driver["incidents"][0]["code"], "DCGM_FR_GPU_RECOVERY_RESET");
  EXPECT_EQ(driver["incidents"][0]["recommended_action"], "reset-gpu") << driver.dump();
  EXPECT_EQ(Values(engine, 0, "150")[150]["status"], "reset_required");
  EXPECT_EQ(Health(engine)["gpus"][1]["status"], "PASS");
}

// The fabric of an NVSwitch system, as DCGM's NVLink watch judges it: the fabric manager still
// training WARNs, not started FAILs (DCGM_FR_FABRIC_PROBE_STATE), a fault in the health mask FAILs
// (DCGM_FR_FIELD_VIOLATION); the fields reach the exporter under dcgm-exporter 4.8.4's names. A
// driver with only the v2 struct has no summary. Before, Vigil read no fabric state: PASS.
TEST(NvmlTest, AFabricNotTrainedOrUnhealthyFailsNvlink) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 3);
  fake.gpu(0)["fabric"] = {{"state", 2}};                           // in progress
  fake.gpu(1)["fabric"] = {{"state", 3}, {"health_mask", 1 << 4}};  // route unhealthy
  fake.gpu(2)["fabric"] = {{"state", 3}, {"v2_only", true}};        // healthy, an older driver
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const auto nvlink = [&](int gpu) { return Health(engine)["gpus"][gpu]["systems"]["nvlink"]; };
  ASSERT_TRUE(Eventually([&] { return nvlink(1)["status"] == "FAIL"; })) << nvlink(1).dump();
  EXPECT_EQ(nvlink(1)["incidents"][0]["code"], "DCGM_FR_FIELD_VIOLATION");
  EXPECT_THAT(nvlink(1)["incidents"][0]["message"].get<std::string>(),
              HasSubstr("Fabric Health: Route Unhealthy"));
  EXPECT_EQ(nvlink(0)["status"], "WARN") << nvlink(0).dump();
  EXPECT_EQ(nvlink(2)["status"], "PASS") << nvlink(2).dump();
  std::map<int, json> v = Values(engine, 2, "170,174,175");
  EXPECT_EQ(v[170]["value"], 3);
  EXPECT_EQ(v[174]["value"], 0);
  EXPECT_EQ(v[175]["status"], "not_supported") << "no summary in the v2 struct";

  fake.gpu(0)["fabric"] = {{"state", 1}};  // the fabric manager is not running
  fake.Write();
  ASSERT_TRUE(Eventually([&] { return nvlink(0)["status"] == "FAIL"; })) << nvlink(0).dump();
  EXPECT_EQ(nvlink(0)["incidents"][0]["code"], "DCGM_FR_FABRIC_PROBE_STATE");
  EXPECT_THAT(nvlink(0)["incidents"][0]["message"].get<std::string>(),
              HasSubstr("Fabric State is Not Started (1)"));

  // The exporter serves them when its counters file asks, as dcgm-exporter 4.8.4's opt-in does.
  std::ofstream(dir.File("counters.csv"))
      << "DCGM_FI_DEV_FABRIC_MANAGER_STATUS, gauge, Fabric manager status.\n"
         "DCGM_FI_DEV_FABRIC_HEALTH_MASK, gauge, Fabric health mask.\n"
         "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, gauge, Fabric health summary.\n";
  HttpDaemon exporter("exporter", dir.path(), engine.unix_address,
                      {"--node-name", "n1", "-f", dir.File("counters.csv")});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  const std::string metrics = exporter.GetUntil("/metrics", [](const std::string& body) {
    return body.find("DCGM_FI_DEV_FABRIC_HEALTH_MASK{") != std::string::npos;
  });
  EXPECT_THAT(metrics, HasSubstr("DCGM_FI_DEV_FABRIC_MANAGER_STATUS{gpu=\"0\""));
  EXPECT_THAT(metrics, HasSubstr("DCGM_FI_DEV_FABRIC_HEALTH_MASK{gpu=\"1\""));
  EXPECT_THAT(metrics, HasSubstr("DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY{gpu=\"0\""));
}

TEST(NvmlTest, AnOlderDriverWithoutSomeSymbolsStillServes) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(kOldDriver), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  std::map<int, json> v;
  ASSERT_TRUE(Eventually([&] {
    v = Values(engine, 0, "112,252,253,1002,1507,150");
    return v.count(150) && v[150]["status"] == "ok";
  }));
  EXPECT_EQ(v[112]["status"], "ok");              // through the older ThrottleReasons entry point
  EXPECT_EQ(v[252]["status"], "ok");              // through nvmlDeviceGetMemoryInfo (v1)
  EXPECT_EQ(v[253]["status"], "not_supported");   // v1 has no reserved figure
  EXPECT_EQ(v[1002]["status"], "not_supported");  // no GPM
  EXPECT_EQ(v[1507]["status"], "not_supported");  // no unrepairable-memory flag
  // It predates the GPU recovery action (field 230 of NVML): not supported, and the driver
  // system judges the rest.
  EXPECT_EQ(Values(engine, 0, "1523")[1523]["status"], "not_supported");
  EXPECT_TRUE(Eventually([&] { return Health(engine)["gpus"][0]["status"] == "PASS"; }));
}

TEST(NvmlTest, AGpuLostMidRunFailsAloneAndTheOthersKeepUpdating) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][1]["status"] == "PASS"; }));

  fake.gpu(1)["lost"] = true;
  fake.gpu(0)["values"]["temperature"] = 66;
  fake.Write();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][1]["status"] == "FAIL"; }));
  const json health = Health(engine);
  const json driver = health["gpus"][1]["systems"]["driver"];
  ASSERT_FALSE(driver["incidents"].empty());
  EXPECT_EQ(driver["incidents"][0]["code"], "DCGM_FR_FALLEN_OFF_BUS");
  EXPECT_EQ(health["gpus"][1]["systems"]["memory"]["status"], "UNKNOWN");
  EXPECT_EQ(health["gpus"][0]["status"], "PASS");
  EXPECT_EQ(health["gpus"][2]["status"], "PASS");
  EXPECT_EQ(Values(engine, 1, "150")[150]["status"], "gpu_lost");
  EXPECT_TRUE(Eventually([&] { return Values(engine, 0, "150")[150]["value"] == 66; }));
  EXPECT_TRUE(engine.process->WaitForStderr("GPU is lost"));
}

// A registered GPU that falls off the bus fails every wait on the event set (the fake, as NVML
// may): the engine makes a new set without it, and the other GPUs' XIDs are seen. Before, every
// wait failed and no XID was seen again.
TEST(NvmlTest, XidsOfTheOtherGpusAreSeenAfterOneIsLost) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  fake.gpu(1)["lost"] = true;
  fake.Write();
  ASSERT_TRUE(engine.process->WaitForStderr("listening again for the 1 GPU(s) that still register"))
      << engine.process->Stderr();
  fake.gpu(0)["xids"] = {31};
  fake.Write();
  EXPECT_TRUE(EventuallyInEvents(engine, "XID 31"));
}

TEST(NvmlTest, AHungCallTimesOutThatGpuWhileTheOthersKeepUpdating) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  const std::string config = dir.File("engine.yaml");
  std::ofstream(config) << "sampling:\n  tick_interval: 250ms\n  gpu_read_timeout: 100ms\n";
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {"--config", config});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][3]["status"] == "PASS"; }));

  fake.gpu(3)["hang"] = {"nvmlDeviceGetTemperatureV"};
  fake.Write();
  ASSERT_TRUE(Eventually([&] { return Values(engine, 3, "150")[150]["status"] == "timeout"; }));
  EXPECT_TRUE(engine.process->WaitForStderr("did not answer within 100ms"));
  // The engine keeps ticking and every other GPU keeps its fresh readings.
  uint64_t seq_before = 0;
  uint64_t seq_after = 0;
  Values(engine, 0, "150", &seq_before);
  fake.gpu(0)["values"]["temperature"] = 59;
  fake.Write();
  EXPECT_TRUE(Eventually([&] { return Values(engine, 0, "150", &seq_after)[150]["value"] == 59; }));
  EXPECT_GT(seq_after, seq_before);
  ASSERT_TRUE(Eventually([&] {
    const json gpu3 = Health(engine)["gpus"][3];
    return gpu3["status"] != "PASS" && !gpu3["systems"]["driver"]["incidents"].empty();
  }));
  const json health = Health(engine);
  EXPECT_THAT(health["gpus"][3]["systems"]["driver"]["incidents"][0]["message"].get<std::string>(),
              HasSubstr("did not answer"));
  EXPECT_EQ(health["gpus"][0]["status"], "PASS");
  // Counted, for an alert on the exporter's vigil_engine_gpu_read_timeouts_total.
  const json counters =
      json::parse(Vigil({"info", "--json", "--engine", engine.unix_address}).out)["counters"];
  // Every tick that GPU cannot be read counts, so the rate stays up while the call is stuck.
  EXPECT_GE(counters["gpu_read_timeouts"].get<int>(), 2);
  EXPECT_GE(counters["gpu_read_failures"].get<int>(), counters["gpu_read_timeouts"].get<int>());

  // The call returns: the GPU reads normally again.
  fake.gpu(3).erase("hang");
  fake.Write();
  EXPECT_TRUE(Eventually([&] { return Values(engine, 3, "150")[150]["status"] == "ok"; }));
  EXPECT_TRUE(engine.process->WaitForStderr("answers again"));
}

// nvmlDeviceRegisterEvents answering UNKNOWN for one GPU leaves the event set undefined (the
// fake's set then delivers nothing, as the driver's may): the engine makes a new set and
// registers the other GPUs again, so their XIDs still arrive.
TEST(NvmlTest, ARegistrationAnsweringUnknownGetsANewEventSet) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  fake.gpu(1)["errors"] = {{"nvmlDeviceRegisterEvents", 999}};
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  EXPECT_TRUE(engine.process->WaitForStderr("registering the others again on a new event set"));
  fake.gpu(0)["xids"] = {79};
  fake.gpu(3)["xids"] = {48};
  fake.Write();
  EXPECT_TRUE(Eventually([&] {
    const json health = Health(engine);
    return health["gpus"][0]["status"] == "FAIL" && health["gpus"][3]["status"] == "FAIL";
  }));
}

TEST(NvmlTest, XidsFromTheDriverReachEventsField230AndHealth) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  Process events({VigilBinary(), "events", "--json", "--engine", engine.unix_address}, dir.path());
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][2]["status"] == "PASS"; }));

  fake.gpu(2)["xids"] = {79};
  fake.Write();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][2]["status"] == "FAIL"; }));
  EXPECT_TRUE(Eventually([&] { return Values(engine, 2, "230")[230]["value"] == 79; }));
  json xid;
  EXPECT_TRUE(Eventually([&] {
    for (const json& event : JsonLines(events.Stdout())) {
      if (event["kind"] == "XID") xid = event;
    }
    return !xid.is_null();
  }));
  EXPECT_EQ(xid["gpu"], 2);
  EXPECT_EQ(xid["xid"], 79);
  EXPECT_FALSE(xid["injected"].get<bool>());
  EXPECT_EQ(Health(engine)["gpus"][1]["status"], "PASS");
  events.Signal(SIGTERM);
}

TEST(NvmlTest, AResetRunsTheConfiguredCommandOnlyOnAGpuNoComputeProcessUses) {
  for (const std::string& library : {kCurrentDriver, kOldDriver}) {
    SCOPED_TRACE(library);  // the old driver lists processes with _v2 instead of _v3
    TempDir dir;
    FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
    fake.gpu(1)["processes"] = {4242};
    fake.Write();
    const std::string record = dir.File("resets");
    EngineProcess engine(
        dir.path(), "n1", NvmlArgs(library),
        {"--gpu-reset-command", WriteResetScript(dir, record) + " {uuid} {index}"});
    ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();

    auto busy = Vigil({"reset-gpu", "--gpu", "1", "--engine", engine.unix_address});
    EXPECT_EQ(busy.exit_code, 1) << busy.out;
    EXPECT_THAT(busy.err, HasSubstr("in use by 1 compute process (pid 4242): not reset"));
    std::ifstream none(record);
    EXPECT_FALSE(none.good()) << "the command did not run";

    auto reset = Vigil({"reset-gpu", "--gpu", "0", "--json", "--engine", engine.unix_address});
    ASSERT_EQ(reset.exit_code, 0) << reset.err;
    const json result = json::parse(reset.out);
    EXPECT_EQ(result["uuid"], fake.gpu(0)["uuid"]);
    EXPECT_THAT(result["output"].get<std::string>(), HasSubstr("GPU reset ok"));
    std::string line;
    std::getline(std::ifstream(record) >> std::ws, line);
    EXPECT_EQ(line, fake.gpu(0)["uuid"].get<std::string>() + " 0");
  }
}

// Drivers 535.43 to 535.86 wrote 32-byte entries from nvmlDeviceGetComputeRunningProcesses_v3
// where nvml.h says 24 (nvitop #79, #89); 535.104 went back to 24. Read with the wrong size,
// the second pid comes from the first entry's protected-memory count (0): every pid must come
// out right on both, and the larger entries never overflow the engine's buffer (the ASan run).
TEST(NvmlTest, TheComputeProcessesOfADriverThatWritesLargerEntriesAreReadRight) {
  for (const std::string version : {"535.54.03", "535.104.05"}) {
    SCOPED_TRACE(version);
    TempDir dir;
    FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
    fake.script()["driver_version"] = version;
    // More than the engine's first guess of 8, so it asks again with a bigger buffer.
    fake.gpu(1)["processes"] = {4242, 5151, 6161, 7171, 8181, 9191, 10101, 11111, 12121, 13131};
    fake.Write();
    EngineProcess engine(dir.path(), "n1", NvmlArgs(), {"--gpu-reset-command", "/bin/true"});
    ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
    auto busy = Vigil({"reset-gpu", "--gpu", "1", "--engine", engine.unix_address});
    EXPECT_EQ(busy.exit_code, 1) << busy.out;
    EXPECT_THAT(busy.err,
                HasSubstr("in use by 10 compute processes (pid 4242, 5151, 6161, 7171, 8181, 9191, "
                          "10101, 11111, 12121, 13131): not reset"));
    if (version == "535.54.03") {
      EXPECT_TRUE(engine.process->WaitForStderr("lists compute processes in 32-byte entries"));
    } else {
      EXPECT_THAT(engine.process->Stderr(), Not(HasSubstr("32-byte entries")));
    }
  }
}

// The driver refuses a reset while any process holds NVML (fake-nvidia-smi as nvidia-smi does):
// the engine releases NVML around the command, initialises it again, opens the GPUs again and
// registers the XID events anew. Before, the reset was refused ("In use by another client").
TEST(NvmlTest, AResetReleasesNvmlAndTheGpuItsEventsAndValuesComeBack) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(),
                       {"--gpu-reset-command", FakeNvidiaSmi() + " --gpu-reset -i {uuid}"});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][0]["status"] == "PASS"; }));
  // The fake refuses while a holder is alive: the engine is one.
  auto refused = RunCommand({FakeNvidiaSmi(), "--gpu-reset", "-i", "0"});
  EXPECT_EQ(refused.exit_code, 255);
  EXPECT_THAT(refused.out, HasSubstr("In use by another client"));

  fake.gpu(0)["reset_required"] = true;
  fake.Write();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][0]["status"] == "FAIL"; }));

  auto reset = Vigil({"reset-gpu", "--gpu", "0", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(reset.exit_code, 0) << reset.err << engine.process->Stderr();
  EXPECT_THAT(json::parse(reset.out)["output"].get<std::string>(),
              HasSubstr("GPU 00000000:10:00.0 was successfully reset."));
  const json after = json::parse(std::ifstream(dir.File("fake-nvml.json")));
  EXPECT_EQ(after["gpus"][0].value("resets", 0), 1);
  EXPECT_TRUE(engine.process->WaitForStderr("NVML released for a GPU reset"));
  EXPECT_TRUE(engine.process->WaitForStderr("NVML initialised again after the GPU reset"));
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][0]["status"] == "PASS"; }))
      << Health(engine).dump();

  // Values and XIDs of both GPUs flow again, through the new handles and event set.
  fake.script() = after;
  fake.gpu(1)["values"]["temperature"] = 61;
  fake.gpu(0)["xids"] = {31};
  fake.Write();
  EXPECT_TRUE(Eventually([&] { return Values(engine, 1, "150")[150]["value"] == 61; }));
  EXPECT_TRUE(EventuallyInEvents(engine, "XID 31"));
}

TEST(NvmlTest, AResetCommandThatFailsOrCannotBeSplitIsReported) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 1);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {"--gpu-reset-command", "false {uuid}"});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  auto failed = Vigil({"reset-gpu", "--gpu", "0", "--engine", engine.unix_address});
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, HasSubstr("the reset command (false {uuid}) failed with exit code 1"));

  auto refused = Vigil({"engine", "--backend", "nvml", "--nvml-library", kCurrentDriver, "--socket",
                        dir.File("e.sock"), "--listen", "", "--state-dir", dir.File("state"),
                        "--gpu-reset-command", "reset --serial {serial}"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("--gpu-reset-command: command 'reset --serial {serial}': "
                                     "unknown placeholder {serial}"));
}

// A MIG instance as the fake presents it: a 1g.10gb (or other profile) at `start`, of 10 GiB
// with `used_gib` used.
json FakeMigInstance(int gpu_instance, const std::string& profile, int start, int size,
                     int used_gib) {
  return {{"gpu_instance", gpu_instance},
          {"compute_instance", 0},
          {"profile", profile},
          {"uuid", fmt::format("MIG-00000000-0000-0000-0000-0000000000{:02d}", gpu_instance)},
          {"placement", {start, size}},
          {"memory_total", 10ULL * size << 30},
          {"memory_used", static_cast<unsigned long long>(used_gib) << 30},
          {"gpm", {{"1", 25.0 * gpu_instance}}}};
}

std::vector<std::string> Profiles(const json& gpu) {
  std::vector<std::string> out;
  for (const json& instance : gpu["mig_instances"]) {
    out.push_back(fmt::format("{}#{}@{}", instance["profile"].get<std::string>(),
                              instance["gpu_instance_id"].get<int>(),
                              instance["placement_start"].get<int>()));
  }
  return out;
}

TEST(NvmlTest, MigInstancesAreDiscoveredSampledAndFollowedWhenTheLayoutChanges) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
  // GPU instance 10 split in two compute instances: a MIG device each, one GPU instance.
  json second_compute_instance = FakeMigInstance(10, "1g.10gb", 3, 1, 2);
  second_compute_instance["compute_instance"] = 1;
  second_compute_instance["uuid"] = "MIG-00000000-0000-0000-0000-0000000000ff";
  fake.gpu(0)["mig"] = {
      {"mode", 1},
      {"instances",
       {FakeMigInstance(3, "2g.20gb", 0, 2, 4), FakeMigInstance(9, "1g.10gb", 2, 1, 1),
        FakeMigInstance(10, "1g.10gb", 3, 1, 2), second_compute_instance}}};
  fake.gpu(1)["mig"] = {{"mode", 0}};  // MIG-capable, whole
  // The driver fails a GPM request whole when one metric is absent (an instance has only the
  // ratios, and here only one of them): the engine asks an instance for its ratios alone, and one
  // metric per call when the whole request is refused, as DCGM does.
  fake.gpu(0)["gpm_whole_call_rejection"] = true;
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const auto discovery = [&] {
    auto run = Vigil({"discovery", "--json", "--engine", engine.unix_address});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return json::parse(run.out, nullptr, false)["gpus"];
  };
  json gpus = discovery();
  EXPECT_TRUE(gpus[0]["mig_mode"].get<bool>());
  EXPECT_THAT(Profiles(gpus[0]),
              ::testing::ElementsAre("2g.20gb#3@0", "1g.10gb#9@2", "1g.10gb#10@3"));
  EXPECT_EQ(gpus[0]["mig_instances"][1]["uuid"], "MIG-00000000-0000-0000-0000-000000000009");
  EXPECT_EQ(gpus[0]["mig_instances"][0]["memory_total_mib"], 20480);
  EXPECT_FALSE(gpus[1]["mig_mode"].get<bool>());
  // Each instance's framebuffer and GPM activity are its own (dmon's instance rows).
  json rows;
  ASSERT_TRUE(Eventually([&] {
    auto dmon = Vigil({"dmon", "-e", "252,1001", "-i", "0", "-c", "1", "--json", "--engine",
                       engine.unix_address});
    const auto ticks = JsonLines(dmon.out);
    if (ticks.empty()) return false;
    rows = ticks.back()["values"];
    for (const json& value : rows) {
      if (value.contains("gpu_instance") && value["field_id"] == 1001 && value["status"] == "ok") {
        return true;
      }
    }
    return false;
  })) << rows.dump();
  std::map<std::pair<int, int>, json> by_instance;
  for (const json& value : rows) {
    if (value.contains("gpu_instance")) {
      by_instance[{value["gpu_instance"].get<int>(), value["field_id"].get<int>()}] =
          value["value"];
    }
  }
  EXPECT_EQ(by_instance[std::pair(3, 252)], 4096);
  EXPECT_EQ(by_instance[std::pair(10, 252)], 2048);
  EXPECT_DOUBLE_EQ(by_instance[std::pair(9, 1001)].get<double>(),
                   9 * 0.25);  // GPM's percent as a ratio

  // The operator recreates GPU 0's instances and enables MIG on GPU 1: the engine follows.
  fake.gpu(0)["mig"]["instances"] = {FakeMigInstance(1, "7g.80gb", 0, 8, 30)};
  fake.gpu(1)["mig"] = {{"mode", 1}, {"instances", {FakeMigInstance(2, "3g.40gb", 4, 4, 0)}}};
  fake.Write();
  ASSERT_TRUE(Eventually(
      [&] {
        gpus = discovery();
        return Profiles(gpus[0]) == std::vector<std::string>{"7g.80gb#1@0"};
      },
      absl::Seconds(20)));
  EXPECT_TRUE(gpus[1]["mig_mode"].get<bool>());
  EXPECT_THAT(Profiles(gpus[1]), ::testing::ElementsAre("3g.40gb#2@4"));
  auto events = Vigil({"events", "--no-follow", "--recent", "50", "--engine", engine.unix_address});
  EXPECT_THAT(events.out, HasSubstr("MIG layout changed: MIG on: 2g.20gb (GPU instance 3), "
                                    "1g.10gb (GPU instance 9), 1g.10gb (GPU instance 10) -> MIG "
                                    "on: 7g.80gb (GPU instance 1)"));
  // MIG off on GPU 0: no instances.
  fake.gpu(0)["mig"] = {{"mode", 0}};
  fake.Write();
  ASSERT_TRUE(
      Eventually([&] { return !discovery()[0]["mig_mode"].get<bool>(); }, absl::Seconds(20)));
}

// In MIG mode the GPU's handle lists every instance's processes only to a privileged caller: the
// reset's safety check asks each MIG device too, so a busy instance stops the reset. Before, the
// GPU's empty answer let the reset go on under a running workload.
TEST(NvmlTest, AResetIsRefusedWhileAMigInstanceIsBusyEvenUnprivileged) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 1);
  json busy = FakeMigInstance(9, "1g.10gb", 2, 1, 1);
  busy["processes"] = {777};
  fake.gpu(0)["mig"] = {{"mode", 1}, {"instances", {FakeMigInstance(3, "2g.20gb", 0, 2, 4), busy}}};
  fake.script()["unprivileged"] = true;
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(),
                       {"--gpu-reset-command", FakeNvidiaSmi() + " --gpu-reset -i {uuid}"});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  auto refused = Vigil({"reset-gpu", "--gpu", "0", "--engine", engine.unix_address});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("in use by 1 compute process (pid 777): not reset"));
  fake.gpu(0)["mig"]["instances"][1]["processes"] = json::array();
  fake.Write();
  auto reset = Vigil({"reset-gpu", "--gpu", "0", "--engine", engine.unix_address});
  EXPECT_EQ(reset.exit_code, 0) << reset.err;
}

// A MIG reconfiguration leaves the GPU's XID registration stale (the fake delivers nothing more
// on it): the event thread registers anew — on the driver's MIG-change event, or, from a driver
// without one, when the engine's poll sees the layout change. Before, XIDs after a
// reconfiguration were never seen.
void ExpectXidsAfterAMigReconfiguration(bool driver_sends_mig_events) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 1);
  fake.gpu(0)["mig"] = {{"mode", 1}, {"instances", {FakeMigInstance(3, "2g.20gb", 0, 2, 4)}}};
  fake.gpu(0)["no_mig_events"] = !driver_sends_mig_events;
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  fake.gpu(0)["mig"]["instances"] = {FakeMigInstance(9, "1g.10gb", 2, 1, 1)};
  fake.Write();
  ASSERT_TRUE(engine.process->WaitForStderr(
      driver_sends_mig_events
          ? "GPU 0: the driver reports a MIG reconfiguration: XID events registered anew"
          : "a GPU's MIG layout changed: XID events registered anew"))
      << engine.process->Stderr();
  fake.gpu(0)["xids"] = {{{"xid", 31}, {"gpu_instance", 9}}};
  fake.Write();
  EXPECT_TRUE(EventuallyInEvents(engine, "XID 31")) << engine.process->Stderr();
}

TEST(NvmlTest, XidsAreSeenAfterAMigReconfigurationTheDriverReports) {
  ExpectXidsAfterAMigReconfiguration(/*driver_sends_mig_events=*/true);
}

TEST(NvmlTest, XidsAreSeenAfterAMigReconfigurationThePollFinds) {
  ExpectXidsAfterAMigReconfiguration(/*driver_sends_mig_events=*/false);
}

// The message of GPU `gpu`'s first memory incident once the GPU FAILs; "" when it does not.
std::string MemoryIncidentOnceFailed(const EngineProcess& engine, int gpu) {
  std::string message;
  Eventually([&] {
    const json health = Health(engine);
    if (health["gpus"][gpu]["status"] != "FAIL") return false;
    message = health["gpus"][gpu]["systems"]["memory"]["incidents"][0]["message"];
    return true;
  });
  return message;
}

TEST(NvmlTest, AnXidInAMigGpuInstanceNamesTheInstance) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
  fake.gpu(1)["mig"] = {{"mode", 1}, {"instances", {FakeMigInstance(5, "1g.10gb", 6, 1, 0)}}};
  fake.Write();
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][1]["status"] == "PASS"; }));
  fake.gpu(1)["xids"] = json::array({{{"xid", 48}, {"gpu_instance", 5}, {"compute_instance", 0}}});
  fake.Write();
  const std::string message = MemoryIncidentOnceFailed(engine, 1);
  ASSERT_FALSE(message.empty()) << engine.process->Stderr();
  EXPECT_THAT(
      message,
      HasSubstr("XID 48 in GPU instance 5 (1g.10gb, MIG-00000000-0000-0000-0000-000000000005)"));
}

// To an engine without the privilege, NVML delivers no XID raised in a MIG instance (nvml.h: only
// the events that affect the whole GPU); the kernel log has the line, with the instance, and the
// engine applies it once from there.
TEST(NvmlTest, AnInstancesXidReachesAnUnprivilegedEngineThroughTheKernelLog) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
  fake.gpu(1)["mig"] = {{"mode", 1}, {"instances", {FakeMigInstance(5, "1g.10gb", 6, 1, 0)}}};
  fake.script()["unprivileged"] = true;
  fake.Write();
  const std::string kmsg = dir.File("kmsg");
  std::ofstream(kmsg) << "6,1,1000,-;Linux version 6.1.0-18-amd64\n";
  std::vector<std::string> args = NvmlArgs();
  args.back() = kmsg;  // --kmsg
  EngineProcess engine(dir.path(), "n1", args, {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(Eventually([&] { return Health(engine)["gpus"][1]["status"] == "PASS"; }));
  fake.gpu(1)["xids"] = json::array({{{"xid", 48}, {"gpu_instance", 5}, {"compute_instance", 0}}});
  fake.Write();
  std::ofstream(kmsg, std::ios::app)
      << "4,2,9000000,c;NVRM: Xid (PCI:0000:11:00 GPU-I:05 GPU-CI:00): 48, pid=4242, "
         "name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the "
         "framebuffer at partition 6, subpartition 0.\n";
  const std::string message = MemoryIncidentOnceFailed(engine, 1);
  ASSERT_FALSE(message.empty()) << engine.process->Stderr();
  EXPECT_THAT(message, HasSubstr("XID 48 in GPU instance 5"));
  const json info = json::parse(Vigil({"info", "--json", "--engine", engine.unix_address}).out);
  EXPECT_EQ(info["counters"]["xid_events"], 1);
  EXPECT_EQ(info["counters"]["kernel_log_xids"], 1);
}

TEST(NvmlTest, NoDriverNoGpuOrABrokenLibraryExitTwoWithAMessage) {
  TempDir dir;
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 4);
  const auto engine = [&](const std::string& library) {
    return Vigil({"engine", "--backend", "nvml", "--nvml-library", library, "--socket",
                  dir.File("e.sock"), "--listen", "", "--state-dir", dir.File("state")});
  };
  fake.script()["init_error"] = 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  fake.Write();
  auto not_loaded = engine(kCurrentDriver);
  EXPECT_EQ(not_loaded.exit_code, 2);
  EXPECT_THAT(not_loaded.err, HasSubstr("NVML failed to initialise: Driver Not Loaded"));

  fake.script()["init_error"] = 0;
  fake.script()["gpus"] = json::array();
  fake.Write();
  auto no_gpu = engine(kCurrentDriver);
  EXPECT_EQ(no_gpu.exit_code, 2);
  EXPECT_THAT(no_gpu.err, HasSubstr("NVML found no GPU"));

  auto missing = engine(dir.File("nowhere/libnvidia-ml.so.1"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("is the NVIDIA driver installed"));

  // A shared library, but not NVML.
  auto wrong = engine("libm.so.6");
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_THAT(wrong.err, HasSubstr("not a usable NVML library"));
}

}  // namespace
}  // namespace vigil::testing
