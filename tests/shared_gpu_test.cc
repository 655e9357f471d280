// End-to-end tests of per-pod series on shared GPUs (`vigil exporter --kubernetes-virtual-gpus`,
// dcgm-exporter #594) with the real binaries: an engine on the fake libnvidia-ml whose GPU runs
// two pods' processes (each with its memory and SM share), a /proc tree holding their cgroups as
// the kubelet names them, the fake kubelet giving both pods the GPU (time-slicing replicas, or one
// MIG instance), and the fake API server giving the pods' UIDs. promtool checks each scrape.
#include <filesystem>
#include <fstream>

#include "daemon.h"
#include "fake_kubelet.h"
#include "fake_nvml/script.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1024 * 1024;
const std::string kContainerId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

class SharedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api = FakeKubeApi::Start(dir.path(), &error);
    ASSERT_NE(api, nullptr) << error;
    proc_root = dir.File("proc");
    // The host's /proc as the exporter's --proc-root: pid 2 is kthreadd there alone.
    WriteProc(2, "comm", "kthreadd\n");
  }

  // Pod `ns`/`name` on this node (node-a), created on the API server; returns its UID.
  std::string AddPod(const std::string& ns, const std::string& name) {
    api->AddPod(
        {{"metadata", {{"namespace", ns}, {"name", name}}}, {"spec", {{"nodeName", "node-a"}}}});
    for (const json& pod : api->Pods()) {
      if (pod["metadata"]["namespace"] == ns && pod["metadata"]["name"] == name) {
        return pod["metadata"]["uid"];
      }
    }
    return "";
  }

  void WriteProc(uint32_t pid, const std::string& file, const std::string& text) {
    std::filesystem::create_directories(proc_root + "/" + std::to_string(pid));
    std::ofstream(fmt::format("{}/{}/{}", proc_root, pid, file)) << text;
  }
  // Process `pid` runs in a container of pod `uid`, in the cgroup the kubelet's systemd driver
  // gives a Burstable pod on cgroup v2.
  void RunInPod(uint32_t pid, std::string uid) {
    std::replace(uid.begin(), uid.end(), '-', '_');
    WriteProc(pid, "cgroup",
              "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid +
                  ".slice/cri-containerd-" + kContainerId + ".scope\n");
  }
  void EndProcess(uint32_t pid) {
    std::filesystem::remove_all(proc_root + "/" + std::to_string(pid));
  }

  std::unique_ptr<HttpDaemon> StartExporter(const std::string& engine, const std::string& socket,
                                            const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--node-name",
                                     "node-a",
                                     "--kubernetes",
                                     "--pod-resources-socket",
                                     socket,
                                     "--pod-refresh",
                                     "1s",
                                     "--kubernetes-virtual-gpus",
                                     "--proc-root",
                                     proc_root,
                                     "--service-account-dir",
                                     api->credentials().service_account_dir};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<HttpDaemon>("exporter", dir.path(), engine, args);
  }
  // A cgroup file that names two pods (a process whose pod cannot be told).
  void RunInTwoPods(uint32_t pid, const std::string& uid_a, const std::string& uid_b) {
    WriteProc(pid, "cgroup",
              "0::/kubepods/burstable/pod" + uid_a + "/" + kContainerId +
                  "\n1:cpu:/kubepods/burstable/pod" + uid_b + "/" + kContainerId + "\n");
  }

  // promtool's verdict on a scrape: no error and no duplicate series.
  void ExpectPromtoolAccepts(const std::string& body) {
    const std::string file = dir.File("scrape.txt");
    std::ofstream(file) << body;
    auto promtool = Shell("promtool check metrics < " + file);
    EXPECT_TRUE(promtool.exit_code == 0 || promtool.exit_code == 3) << promtool.err << promtool.out;
    EXPECT_THAT(promtool.err + promtool.out, Not(HasSubstr("duplicate")));
    EXPECT_THAT(promtool.err + promtool.out, Not(HasSubstr("error")));
  }

  TempDir dir;
  std::unique_ptr<FakeKubeApi> api;
  std::string proc_root;
};

std::vector<std::string> NvmlArgs() {
  return {"--backend", "nvml", "--nvml-library", FakeNvmlDir() + "/current/libnvidia-ml.so.1",
          "--kmsg",    ""};
}

// The scrape's lines of metric `name` that carry `label`.
std::vector<std::string> LinesOf(const std::string& body, const std::string& name,
                                 const std::string& label) {
  std::vector<std::string> lines;
  std::istringstream text(body);
  for (std::string line; std::getline(text, line);) {
    if (line.starts_with(name + "{") && line.find(label) != std::string::npos) {
      lines.push_back(line);
    }
  }
  return lines;
}

// Two pods time-slicing GPU 2 (the device plugin's replicas ::0 and ::1): one FB_USED and one
// GPU_UTIL series per pod with its processes' sum beside the GPU's own; a host process and one
// that exited before it was looked up are nobody's. When pod b's process ends, pod b holds its
// replica and uses nothing (0, dcgm-exporter's idle value); when pod b ends, its series go. A
// driver that samples no per-process utilisation takes the per-pod GPU_UTIL away, never to 0.
TEST_F(SharedGpuTest, TwoPodsTimeSlicingAGpuEachHaveTheirOwnUsage) {
  const std::string uid_a = AddPod("ml", "train-a"), uid_b = AddPod("web", "serve-b");
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 3);
  fake.gpu(2)["processes"] = {
      {{"pid", 4001}, {"memory", 3072 * kMiB + 512 * 1024}, {"sm_util", 30}},  // pod a
      {{"pid", 4002}, {"memory", 2048 * kMiB}, {"sm_util", 25}},               // pod a
      {{"pid", 4101}, {"memory", 1024 * kMiB}, {"sm_util", 40}},               // pod b
      {{"pid", 900}, {"memory", 512 * kMiB}, {"sm_util", 5}},                  // a host process
      {{"pid", 4999}, {"memory", 256 * kMiB}, {"sm_util", 1}}};                // exited: no /proc
  fake.Write();
  RunInPod(4001, uid_a);
  RunInPod(4002, uid_a);
  RunInPod(4101, uid_b);
  WriteProc(900, "cgroup", "0::/system.slice/nv-fabricmanager.service\n");
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const std::string uuid2 = fake.gpu(2)["uuid"];

  FakeKubelet kubelet;
  kubelet.AddPod("ml", "train-a", "trainer", {uuid2 + "::0"});
  kubelet.AddPod("web", "serve-b", "server", {uuid2 + "::1"});
  const std::string socket = dir.File("kubelet.sock");
  ASSERT_TRUE(kubelet.Serve(socket));
  auto exporter = StartExporter(engine.unix_address, socket);
  ASSERT_GT(exporter->port(), 0) << exporter->process().Stderr();

  const std::string pod_a = "container=\"trainer\",namespace=\"ml\",pod=\"train-a\",pod_uid=\"" +
                            uid_a + "\",vgpu=\"0\"}";
  const std::string pod_b = "container=\"server\",namespace=\"web\",pod=\"serve-b\",pod_uid=\"" +
                            uid_b + "\",vgpu=\"1\"}";
  std::string body = exporter->GetUntil("/metrics", [&](const std::string& b) {
    return b.find(pod_a) != std::string::npos && b.find(pod_b) != std::string::npos;
  });
  // 3072 MiB (the half MiB floored) + 2048 MiB; 30% + 25%.
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_FB_USED", "pod="),
              ::testing::ElementsAre(HasSubstr(pod_a + " 5120"), HasSubstr(pod_b + " 1024")));
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_GPU_UTIL", "pod="),
              ::testing::ElementsAre(HasSubstr(pod_a + " 55"), HasSubstr(pod_b + " 40")));
  // The GPU's own series stay, without pod labels, once each; the other GPUs are untouched.
  EXPECT_EQ(LinesOf(body, "DCGM_FI_DEV_FB_USED", "UUID=\"" + uuid2 + "\"").size(), 3u);
  EXPECT_EQ(LinesOf(body, "DCGM_FI_DEV_GPU_UTIL", "UUID=\"" + uuid2 + "\"").size(), 3u);
  // Other fields: once per container, as dcgm-exporter copies them (pod_uid only with
  // --kubernetes-enable-pod-uid).
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_GPU_TEMP", "UUID=\"" + uuid2 + "\""),
              ::testing::ElementsAre(HasSubstr("pod=\"train-a\",vgpu=\"0\"}"),
                                     HasSubstr("pod=\"serve-b\",vgpu=\"1\"}")));
  EXPECT_THAT(body, HasSubstr("vigil_exporter_process_pod_lookup_errors_total 0\n"));
  ExpectPromtoolAccepts(body);

  // Pod b's process ends (NVML lists it no more, its /proc entry goes).
  fake.gpu(2)["processes"].erase(2);
  fake.Write();
  EndProcess(4101);
  body = exporter->GetUntil("/metrics", [&](const std::string& b) {
    return b.find(pod_b + " 0\n") != std::string::npos;
  });
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_FB_USED", "pod="),
              ::testing::ElementsAre(HasSubstr(pod_a + " 5120"), HasSubstr(pod_b + " 0")));
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_GPU_UTIL", "pod="),
              ::testing::ElementsAre(HasSubstr(pod_a + " 55"), HasSubstr(pod_b + " 0")));
  // Pod b ends: its series go.
  kubelet.RemovePod("web", "serve-b");
  body = exporter->GetUntil(
      "/metrics", [&](const std::string& b) { return b.find("serve-b") == std::string::npos; });
  EXPECT_THAT(body, Not(HasSubstr("serve-b")));
  EXPECT_EQ(LinesOf(body, "DCGM_FI_DEV_FB_USED", "pod=").size(), 1u);
  ExpectPromtoolAccepts(body);

  // A driver without per-process utilisation: no per-pod GPU_UTIL (not 0); memory stays.
  fake.gpu(2)["no_process_utilization"] = true;
  fake.Write();
  body = exporter->GetUntil("/metrics", [&](const std::string& b) {
    return LinesOf(b, "DCGM_FI_DEV_GPU_UTIL", "pod=").empty();
  });
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_GPU_UTIL", "pod="), ::testing::IsEmpty());
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_FB_USED", "pod="),
              ::testing::ElementsAre(HasSubstr(pod_a + " 5120")));

  // A process whose cgroup file names two pods: whose it is cannot be told, so GPU 2's per-pod
  // memory is not served (the GPU's own is), and the lookup error is counted.
  RunInTwoPods(4002, uid_a, uid_b);
  body = exporter->GetUntil("/metrics", [&](const std::string& b) {
    return LinesOf(b, "DCGM_FI_DEV_FB_USED", "pod=").empty();
  });
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_FB_USED", "pod="), ::testing::IsEmpty());
  EXPECT_EQ(LinesOf(body, "DCGM_FI_DEV_FB_USED", "UUID=\"" + uuid2 + "\"").size(), 1u);
  EXPECT_THAT(body, Not(HasSubstr("vigil_exporter_process_pod_lookup_errors_total 0\n")));
  EXPECT_TRUE(exporter->process().WaitForStderr("the cgroup lines name two pods"));
}

// With -c, /proc is read for the ticks that are rendered only: a process whose pod cannot be told
// is counted once per render (here one every two engine ticks), not once per tick.
TEST_F(SharedGpuTest, WithACollectIntervalTheProcessesPodsAreLookedUpForRenderedTicksOnly) {
  const std::string uid_a = AddPod("ml", "train-a"), uid_b = AddPod("web", "serve-b");
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 1);
  fake.gpu(0)["processes"] = {{{"pid", 4001}, {"memory", 1024 * kMiB}, {"sm_util", 10}}};
  fake.Write();
  RunInTwoPods(4001, uid_a, uid_b);
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  FakeKubelet kubelet;
  kubelet.AddPod("ml", "train-a", "trainer", {fake.gpu(0)["uuid"].get<std::string>() + "::0"});
  const std::string socket = dir.File("kubelet.sock");
  ASSERT_TRUE(kubelet.Serve(socket));
  auto exporter = StartExporter(engine.unix_address, socket, {"-c", "2000"});
  ASSERT_GT(exporter->port(), 0) << exporter->process().Stderr();

  constexpr std::string_view kErrors = "vigil_exporter_process_pod_lookup_errors_total";
  const std::string first = exporter->GetUntil("/metrics", [&](const std::string& body) {
    return SeriesValue(body, "vigil_engine_seq") > 0 && SeriesValue(body, kErrors.data()) > 0;
  });
  const double seq_first = SeriesValue(first, "vigil_engine_seq");
  const double errors_first = SeriesValue(first, kErrors.data());
  ASSERT_GT(errors_first, 0) << first;
  // Three renders later: at least six ticks, and one lookup per render (and perhaps the next
  // render's, made before it is served).
  int renders = 0;
  double seq_seen = seq_first;
  const std::string later = exporter->GetUntil(
      "/metrics",
      [&](const std::string& body) {
        const double seq = SeriesValue(body, "vigil_engine_seq");
        if (seq > seq_seen) {
          ++renders;
          seq_seen = seq;
        }
        return renders >= 3;
      },
      absl::Seconds(20));
  ASSERT_GE(renders, 3) << later;
  const double ticks = SeriesValue(later, "vigil_engine_seq") - seq_first;
  const double lookups = SeriesValue(later, kErrors.data()) - errors_first;
  EXPECT_GE(ticks, 6) << "-c 2000 with a tick a second";
  EXPECT_LE(lookups, ticks / 2 + 1) << ticks << " ticks";
  EXPECT_GE(lookups, 3) << "one per render";
  EXPECT_THAT(LinesOf(later, "DCGM_FI_DEV_FB_USED", "pod="), ::testing::IsEmpty());
}

// A MIG instance two pods share: each pod's framebuffer on that instance, from the processes
// NVML lists on the instance's MIG device; no per-pod utilisation (NVML samples whole GPUs
// only). A pod whose process ends uses 0; a pod that ends has no series.
TEST_F(SharedGpuTest, TwoPodsSharingAMigInstanceEachHaveTheirOwnFramebuffer) {
  const std::string uid_c = AddPod("ml", "infer-c"), uid_d = AddPod("ml", "infer-d");
  FakeNvmlScript fake(dir.File("fake-nvml.json"), 2);
  const std::string mig_uuid = "MIG-00000000-0000-0000-0000-000000000003";
  fake.gpu(0)["mig"] = {
      {"mode", 1},
      {"instances",
       {{{"gpu_instance", 3},
         {"compute_instance", 0},
         {"profile", "3g.40gb"},
         {"uuid", mig_uuid},
         {"placement", {0, 4}},
         {"memory_total", 40ULL << 30},
         {"memory_used", 6ULL << 30},
         {"processes",
          {{{"pid", 5001}, {"memory", 4096 * kMiB}}, {{"pid", 5101}, {"memory", 1536 * kMiB}}}}},
        {{"gpu_instance", 5},
         {"compute_instance", 0},
         {"profile", "3g.40gb"},
         {"uuid", "MIG-00000000-0000-0000-0000-000000000005"},
         {"placement", {4, 4}},
         {"memory_total", 40ULL << 30},
         {"memory_used", 1ULL << 30},
         {"processes", {{{"pid", 5002}, {"memory", 1024 * kMiB}}}}}}}};
  fake.Write();
  RunInPod(5001, uid_c);
  RunInPod(5101, uid_d);
  RunInPod(5002, uid_c);  // pod c's process on the other instance: not this one's
  EngineProcess engine(dir.path(), "n1", NvmlArgs(), {});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();

  FakeKubelet kubelet;
  kubelet.AddMigPod("ml", "infer-c", "triton", "nvidia.com/mig-3g.40gb", {mig_uuid + "::0"});
  kubelet.AddMigPod("ml", "infer-d", "triton", "nvidia.com/mig-3g.40gb", {mig_uuid + "::1"});
  const std::string socket = dir.File("kubelet.sock");
  ASSERT_TRUE(kubelet.Serve(socket));
  auto exporter = StartExporter(engine.unix_address, socket);
  ASSERT_GT(exporter->port(), 0) << exporter->process().Stderr();

  std::string body = exporter->GetUntil("/metrics", [&](const std::string& b) {
    return LinesOf(b, "DCGM_FI_DEV_FB_USED", "pod_uid=").size() == 2;
  });
  const std::string instance = "GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"3\"";
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_FB_USED", "pod_uid="),
              ::testing::ElementsAre(
                  ::testing::AllOf(HasSubstr(instance), HasSubstr("pod=\"infer-c\",pod_uid=\"" +
                                                                  uid_c + "\",vgpu=\"0\"} 4096")),
                  ::testing::AllOf(HasSubstr(instance), HasSubstr("pod=\"infer-d\",pod_uid=\"" +
                                                                  uid_d + "\",vgpu=\"1\"} 1536"))));
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_GPU_UTIL", "pod_uid="), ::testing::IsEmpty());
  // The instance's own framebuffer series stays, without a pod.
  EXPECT_EQ(LinesOf(body, "DCGM_FI_DEV_FB_USED", instance).size(), 3u);
  ExpectPromtoolAccepts(body);

  // Pod d's process ends: d holds its share and uses nothing; then pod d ends: its series go.
  fake.gpu(0)["mig"]["instances"][0]["processes"].erase(1);
  fake.Write();
  EndProcess(5101);
  const std::string idle = "pod=\"infer-d\",pod_uid=\"" + uid_d + "\",vgpu=\"1\"} 0\n";
  body = exporter->GetUntil(
      "/metrics", [&](const std::string& b) { return b.find(idle) != std::string::npos; });
  EXPECT_THAT(body, HasSubstr(idle));
  kubelet.RemovePod("ml", "infer-d");
  body = exporter->GetUntil(
      "/metrics", [&](const std::string& b) { return b.find("infer-d") == std::string::npos; });
  EXPECT_THAT(body, Not(HasSubstr("infer-d")));
  EXPECT_THAT(LinesOf(body, "DCGM_FI_DEV_FB_USED", "pod_uid="),
              ::testing::ElementsAre(
                  HasSubstr("pod=\"infer-c\",pod_uid=\"" + uid_c + "\",vgpu=\"0\"} 4096")));
  ExpectPromtoolAccepts(body);
}

// The flag needs -k and the host's /proc: without either, one line that says what to do, exit 2.
TEST_F(SharedGpuTest, WithoutKubernetesOrTheHostsProcTheFlagIsRefused) {
  auto no_k = Vigil({"exporter", "--kubernetes-virtual-gpus", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(no_k.exit_code, 2);
  EXPECT_THAT(no_k.err, HasSubstr("--kubernetes-virtual-gpus labels pod-attributed series: it "
                                  "needs --kubernetes (-k)"));
  TempDir container_proc;  // a container's own /proc: no kthreadd
  auto own_proc = Vigil({"exporter", "-k", "--kubernetes-virtual-gpus", "--listen", "127.0.0.1:0",
                         "--proc-root", container_proc.path().string(), "--service-account-dir",
                         api->credentials().service_account_dir});
  EXPECT_EQ(own_proc.exit_code, 2);
  EXPECT_THAT(own_proc.err, HasSubstr("does not show the host's processes"));
  EXPECT_THAT(own_proc.err, HasSubstr("--proc-root /host/proc"));
}

}  // namespace
}  // namespace vigil::testing
