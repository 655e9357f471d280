// Tests of the per-pod usage of shared GPUs: sums per pod as dcgm-exporter's #594 makes them
// (MiB floored per process, SM percentages unclamped), idle pods at 0, and every case where a
// value is not known left out rather than guessed: an unread list, a process whose pod cannot be
// told, memory or a share the driver does not give, utilisation on a MIG instance. And the
// lookup of processes' pods in a /proc tree: in a pod, in none, gone, unreadable.
#include "exporter/pod_usage.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

constexpr int64_t kMiB = 1024 * 1024;
const std::string kPodA = "a9c80282-3f6b-4d5b-84d5-a137a6668011";
const std::string kPodB = "b9c80282-3f6b-4d5b-84d5-a137a6668012";

v1::GpuProcess Process(uint32_t pid, int64_t memory, int32_t sm_util, int32_t instance = -1) {
  v1::GpuProcess process;
  process.set_pid(pid);
  process.set_used_memory_bytes(memory);
  process.set_sm_util(sm_util);
  process.set_gpu_instance(instance);
  return process;
}

v1::GpuProcesses List(std::vector<v1::GpuProcess> processes, bool known = true) {
  v1::GpuProcesses list;
  list.set_gpu(2);
  list.set_known(known);
  for (v1::GpuProcess& process : processes) *list.add_processes() = std::move(process);
  return list;
}

ProcessPods Owners() {
  ProcessPods pods;
  pods.uid_of = {{100, kPodA}, {101, kPodA}, {200, kPodB}};
  return pods;
}

TEST(PodUsageTest, EachPodsProcessesAreSummedAndAnIdlePodUsesNothing) {
  // Pod A: 500.9 MiB + 300 MiB (floored per process: 800), 30% + 45%; pod B: 1 GiB, 10%; a host
  // process (pid 7) is nobody's; pod C holds the GPU and runs nothing.
  const auto usage =
      PodUsageOf(List({Process(100, 500 * kMiB + 900 * 1024, 30), Process(101, 300 * kMiB, 45),
                       Process(200, 1024 * kMiB, 10), Process(7, 4096 * kMiB, 90)}),
                 -1, Owners(), {kPodA, kPodB, "c-uid"});
  ASSERT_TRUE(usage.has_value());
  EXPECT_EQ(usage->at(kPodA).fb_used_mib, 800);
  EXPECT_EQ(usage->at(kPodA).gpu_util_percent, 75);
  EXPECT_EQ(usage->at(kPodB).fb_used_mib, 1024);
  EXPECT_EQ(usage->at(kPodB).gpu_util_percent, 10);
  EXPECT_EQ(usage->at("c-uid").fb_used_mib, 0);
  EXPECT_EQ(usage->at("c-uid").gpu_util_percent, 0);
  EXPECT_EQ(usage->size(), 3u);
}

TEST(PodUsageTest, WhatIsNotKnownIsLeftOutNeverGuessed) {
  // The list could not be read: nothing is known, not "every pod idle".
  EXPECT_FALSE(PodUsageOf(List({}, /*known=*/false), -1, Owners(), {kPodA}).has_value());
  // A process whose pod cannot be told could be any pod's.
  ProcessPods untold = Owners();
  untold.untold.insert(300);
  EXPECT_FALSE(
      PodUsageOf(List({Process(100, kMiB, 1), Process(300, kMiB, 1)}), -1, untold, {kPodA}));
  // ... but one on another GPU instance does not matter here.
  EXPECT_TRUE(
      PodUsageOf(List({Process(100, kMiB, 1), Process(300, kMiB, 1, 5)}), -1, untold, {kPodA}));
  // Memory the driver does not give, a share it does not sample: that pod's value only.
  const auto partial = PodUsageOf(List({Process(100, -1, 20), Process(200, kMiB, -1)}), -1,
                                  Owners(), {kPodA, kPodB});
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->at(kPodA).fb_used_mib, std::nullopt);
  EXPECT_EQ(partial->at(kPodA).gpu_util_percent, 20);
  EXPECT_EQ(partial->at(kPodB).fb_used_mib, 1);
  EXPECT_EQ(partial->at(kPodB).gpu_util_percent, std::nullopt);
  // A pod whose UID the API server has not given yet is left out.
  EXPECT_EQ(PodUsageOf(List({}), -1, Owners(), {""})->size(), 0u);
  // Processes not looked up (a render without its tick's lookup): not known; a GPU with no
  // process is idle all the same.
  google::protobuf::RepeatedPtrField<v1::GpuProcesses> lists;
  *lists.Add() = List({Process(100, kMiB, 1)});
  const ProcessPods unknown = UnknownProcessPods(lists);
  EXPECT_TRUE(unknown.uid_of.empty());
  EXPECT_FALSE(PodUsageOf(lists[0], -1, unknown, {kPodA}).has_value());
  EXPECT_EQ(PodUsageOf(List({}), -1, unknown, {kPodA})->at(kPodA).fb_used_mib, 0);
}

TEST(PodUsageTest, AMigInstanceCountsItsOwnProcessesAndNoUtilisation) {
  const auto usage =
      PodUsageOf(List({Process(100, 2048 * kMiB, -1, 3), Process(200, 512 * kMiB, -1, 4)}), 3,
                 Owners(), {kPodA, kPodB});
  ASSERT_TRUE(usage.has_value());
  EXPECT_EQ(usage->at(kPodA).fb_used_mib, 2048);
  EXPECT_EQ(usage->at(kPodB).fb_used_mib, 0);  // its process runs on instance 4
  EXPECT_EQ(usage->at(kPodA).gpu_util_percent, std::nullopt);
  EXPECT_EQ(usage->at(kPodB).gpu_util_percent, std::nullopt);
}

TEST(PodUsageTest, ProcessesAreLookedUpInTheProcRoot) {
  testing::TempDir dir;
  const auto write = [&](uint32_t pid, const std::string& text) {
    std::filesystem::create_directories(dir.File(std::to_string(pid)));
    std::ofstream(dir.File(std::to_string(pid) + "/cgroup")) << text;
  };
  write(100, "0::/kubepods/besteffort/pod" + kPodA + "\n");
  write(7, "0::/system.slice/sshd.service\n");  // a host process
  write(300, "0::/kubepods/pod" + kPodA + "\n1:cpu:/kubepods/pod" + kPodB + "\n");  // two pods
  google::protobuf::RepeatedPtrField<v1::GpuProcesses> lists;
  *lists.Add() = List({Process(100, kMiB, 1), Process(7, kMiB, 1), Process(300, kMiB, 1),
                       Process(404, kMiB, 1)});  // 404: gone
  *lists.Add() = List({Process(100, kMiB, 1)});  // the same process on a second GPU
  std::string error;
  const ProcessPods pods = LookUpProcessPods(dir.path().string(), lists, &error);
  EXPECT_EQ(pods.uid_of.size(), 1u);
  EXPECT_EQ(pods.uid_of.at(100), kPodA);
  EXPECT_THAT(pods.untold, ::testing::UnorderedElementsAre(300u));
  EXPECT_THAT(error, ::testing::HasSubstr("300/cgroup: the cgroup lines name two pods"));
}

}  // namespace
}  // namespace vigil
