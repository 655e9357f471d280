// Tests of the cgroup parser: each layout the kubelet writes (cgroupfs and systemd drivers,
// cgroup v1 and v2, the QoS classes, static pods, nested kubelets, the runtimes' scope names),
// files that name no pod, two pods or are not cgroup files, a process that is gone; and a fuzz
// pass (testing/fuzz.h): for any input, a pod whose UID is well-formed, or a clean one-line error.
#include "pidmap/pod_cgroup.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fuzz.h"
#include "testing/temp_dir.h"

namespace vigil::pidmap {
namespace {

using ::testing::HasSubstr;

const std::string kUid = "a9c80282-3f6b-4d5b-84d5-a137a6668011";
const std::string kSystemdUid = "a9c80282_3f6b_4d5b_84d5_a137a6668011";
const std::string kId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

TEST(PodCgroupTest, EachLayoutTheKubeletWritesNamesItsPodAndContainer) {
  const std::vector<std::pair<std::string, PodCgroup>> cases = {
      // cgroup v2, systemd driver, containerd.
      {"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kSystemdUid +
           ".slice/cri-containerd-" + kId + ".scope\n",
       {kUid, kId}},
      // v2, systemd, a Guaranteed pod (no QoS slice), cri-o.
      {"0::/kubepods.slice/kubepods-pod" + kSystemdUid + ".slice/crio-" + kId + ".scope\n",
       {kUid, kId}},
      // v2, a kubelet nested under kubelet.slice (kind, --cgroup-root), docker.
      {"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
       "kubelet-kubepods-burstable-pod" +
           kSystemdUid + ".slice/docker-" + kId + ".scope\n",
       {kUid, kId}},
      // v2, cgroupfs driver.
      {"0::/kubepods/burstable/pod" + kUid + "/" + kId + "\n", {kUid, kId}},
      // v1, cgroupfs, a line per hierarchy; a Guaranteed pod.
      {"12:memory:/kubepods/pod" + kUid + "/" + kId + "\n11:cpu,cpuacct:/kubepods/pod" + kUid +
           "/" + kId + "\n1:name=systemd:/kubepods/pod" + kUid + "/" + kId + "\n0::/\n",
       {kUid, kId}},
      // A static pod: its UID is the manifest's hash, 32 hex digits.
      {"0::/kubepods/besteffort/pod0123456789abcdef0123456789abcdef/crio-" + kId + "\n",
       {"0123456789abcdef0123456789abcdef", kId}},
      // The pod's own cgroup (its sandbox's processes, or a path cut short): no container.
      {"0::/kubepods/besteffort/pod" + kUid + "\n", {kUid, ""}},
      // Read by a pod in a cgroup namespace of its own (containerd's default on v2), the path is
      // relative to the reader's container and climbs out of it: systemd and cgroupfs drivers.
      {"0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod" + kSystemdUid +
           ".slice/cri-containerd-" + kId + ".scope\n",
       {kUid, kId}},
      {"0::/../../../besteffort/pod" + kUid + "/" + kId + "\n", {kUid, kId}},
      {"0::/../../pod" + kUid + "/" + kId + "\n", {kUid, kId}},
  };
  for (const auto& [text, want] : cases) {
    auto pod = ParseProcCgroup(text);
    ASSERT_TRUE(pod.ok()) << text << pod.status();
    EXPECT_EQ(*pod, want) << text;
  }
}

TEST(PodCgroupTest, NoPodTwoPodsOrNotACgroupFileIsSaidNeverGuessed) {
  // Host processes and services: no pod.
  for (const std::string& text : std::vector<std::string>{
           "0::/\n", "0::/system.slice/containerd.service\n", "0::/user.slice/user-0.slice\n",
           "4:memory:/process_api/866d0c9fd922f386431b136cc83708df\n0::/\n",
           // "pod" and a UUID, but not under kubepods (a container outside Kubernetes).
           "0::/docker/pod" + kUid + "/" + kId + "\n",
           // A kubepods path with a malformed UID.
           "0::/kubepods/besteffort/podnot-a-uid/" + kId + "\n"}) {
    auto pod = ParseProcCgroup(text);
    EXPECT_TRUE(absl::IsNotFound(pod.status())) << text << pod.status();
  }
  const std::string other = "b9c80282-3f6b-4d5b-84d5-a137a6668011";
  auto two = ParseProcCgroup("12:memory:/kubepods/pod" + kUid + "/" + kId + "\n0::/kubepods/pod" +
                             other + "/" + kId + "\n");
  EXPECT_TRUE(absl::IsInvalidArgument(two.status()));
  EXPECT_THAT(two.status().message(), HasSubstr("name two pods"));
  for (const char* bad : {"", "\n\n", "hello world\n", "x::/kubepods\n"}) {
    auto pod = ParseProcCgroup(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(pod.status())) << bad << pod.status();
  }
}

TEST(PodCgroupTest, AProcessIsReadFromTheProcRootAndOneThatIsGoneIsNotFound) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.File("4242"));
  std::ofstream(dir.File("4242/cgroup")) << "0::/kubepods/pod" << kUid << "/" << kId << "\n";
  auto pod = PodOfPid(dir.path().string(), 4242);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->pod_uid, kUid);
  auto gone = PodOfPid(dir.path().string(), 4343);
  EXPECT_TRUE(absl::IsNotFound(gone.status()));
  EXPECT_THAT(gone.status().message(), HasSubstr("process 4343 is gone"));
  std::ofstream(dir.File("4242/cgroup")) << "garbage\n";
  auto bad = PodOfPid(dir.path().string(), 4242);
  EXPECT_THAT(bad.status().message(), HasSubstr("4242/cgroup: not a cgroup line"));
}

// Only the host's /proc can look NVML's pids up: a container's own is refused with what to mount.
TEST(PodCgroupTest, OnlyAProcRootOfTheHostsPidNamespaceIsAccepted) {
  testing::TempDir dir;
  const std::string root = dir.path().string();
  auto none = CheckHostProcRoot(root);
  EXPECT_TRUE(absl::IsFailedPrecondition(none)) << none;
  EXPECT_THAT(none.message(), HasSubstr("--proc-root /host/proc"));
  std::filesystem::create_directories(dir.File("2"));
  std::ofstream(dir.File("2/comm")) << "sleep\n";  // a container's pid 2
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckHostProcRoot(root)));
  std::ofstream(dir.File("2/comm")) << "kthreadd\n";
  EXPECT_TRUE(CheckHostProcRoot(root).ok());
}

TEST(PidmapFuzzTest, AnyFileGivesAWellFormedPodOrOneCleanLine) {
  const std::vector<std::string> seeds = {
      "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kSystemdUid +
          ".slice/cri-containerd-" + kId + ".scope\n",
      "12:memory:/kubepods/pod" + kUid + "/" + kId + "\n1:name=systemd:/kubepods/pod" + kUid +
          "\n0::/\n",
      "0::/system.slice/containerd.service\n"};
  testing::Fuzz("cgroup files", seeds, "0123456789abcdef:/-_.kubepodsslicescopecri\n", 20'000,
                [](const std::string& input) -> bool {
                  auto pod = ParseProcCgroup(input);
                  if (pod.ok()) {
                    EXPECT_TRUE(pod->pod_uid.size() == 36 || pod->pod_uid.size() == 32) << input;
                    EXPECT_EQ(pod->pod_uid.find('_'), std::string::npos) << input;
                    EXPECT_TRUE(pod->container_id.empty() || pod->container_id.size() == 64);
                    return true;
                  }
                  for (char c : pod.status().message()) {
                    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << pod.status();
                  }
                  return false;
                });
}

}  // namespace
}  // namespace vigil::pidmap
