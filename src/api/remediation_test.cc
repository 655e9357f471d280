// Tests of remediation's node annotations: every shape reads back as written, and a value that a
// person or another tool mangled is refused with what is wrong.
#include "api/remediation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

const absl::Time kTime = absl::FromUnixMillis(1'780'000'000'123);

TEST(RemediationAnnotationsTest, FaultsReadBackAsWritten) {
  PublishedFaults faults{.engine = "abc", .seq = 42, .pods_known = true};
  faults.faults.push_back({.gpu = 1,
                           .uuid = "GPU-1",
                           .system = "memory",
                           .code = "DCGM_FR_VOLATILE_DBE_DETECTED",
                           .message = "XID 48",
                           .action = v1::RECOMMENDED_ACTION_RESET_GPU,
                           .injected = true,
                           .actions_allowed = true,
                           .first_seen = kTime});
  faults.faults.push_back({.system = "nvswitch", .action = v1::RECOMMENDED_ACTION_REBOOT});
  faults.gpu_pods.push_back({.uuid = "GPU-1", .pods = {"ml/train-0"}});
  faults.devices.push_back({.uuid = "GPU-1",
                            .driver = "gpu.nvidia.com",
                            .pool = "n1",
                            .device = "gpu-4",
                            .rule = "vigil-n1-gpu-4"});
  auto parsed = ParseFaults(FaultsToJson(faults));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->engine, "abc");
  EXPECT_EQ(parsed->seq, 42u);
  ASSERT_EQ(parsed->faults.size(), 2u);
  EXPECT_EQ(parsed->faults[0].gpu, 1);
  EXPECT_EQ(parsed->faults[0].uuid, "GPU-1");
  EXPECT_EQ(parsed->faults[0].action, v1::RECOMMENDED_ACTION_RESET_GPU);
  EXPECT_TRUE(parsed->faults[0].injected);
  EXPECT_TRUE(parsed->faults[0].actionable());
  EXPECT_EQ(parsed->faults[0].first_seen, kTime);
  EXPECT_EQ(parsed->faults[1].gpu, -1) << "node-level";
  EXPECT_EQ(parsed->faults[1].action, v1::RECOMMENDED_ACTION_REBOOT);
  ASSERT_TRUE(parsed->pods_known);
  ASSERT_EQ(parsed->gpu_pods.size(), 1u);
  EXPECT_THAT(parsed->gpu_pods[0].pods, ::testing::ElementsAre("ml/train-0"));
  EXPECT_EQ(parsed->devices, faults.devices);
  EXPECT_THAT(
      ParseFaults(R"({"engine":"e","faults":[],"devices":[{"uuid":"GPU-1"}]})").status().message(),
      HasSubstr("has no \"driver\""));
  PublishedFault drill{.injected = true};
  EXPECT_FALSE(drill.actionable()) << "a drill's fault without permission drives nothing";
}

TEST(RemediationAnnotationsTest, RequestsResultsAndStateReadBackAsWritten) {
  const ActionRequest request{.id = "reset-n1-1",
                              .gpus = {{.index = 2, .uuid = "GPU-2"}},
                              .reason = "XID 48",
                              .requested = kTime};
  auto parsed_request = ParseRequest(RequestToJson(request));
  ASSERT_TRUE(parsed_request.ok()) << parsed_request.status();
  EXPECT_EQ(parsed_request->id, request.id);
  EXPECT_EQ(parsed_request->gpus, request.gpus);
  EXPECT_EQ(parsed_request->requested, kTime);

  const ActionResult result{.id = "reset-n1-1",
                            .outcome = ActionOutcome::kRefused,
                            .message = "in use",
                            .finished = kTime};
  auto parsed_result = ParseResult(ResultToJson(result));
  ASSERT_TRUE(parsed_result.ok()) << parsed_result.status();
  EXPECT_EQ(parsed_result->outcome, ActionOutcome::kRefused);
  EXPECT_EQ(parsed_result->message, "in use");

  NodeRemediation state{
      .step = RemediationStep::kDraining,
      .action = v1::RECOMMENDED_ACTION_RESET_GPU,
      .gpus = {{.index = 0, .uuid = "GPU-0"}},
      .incident = "GPU 0 memory FAIL",
      .episode_started = kTime,
      .step_started = kTime + absl::Seconds(1),
      .attempts = {kTime - absl::Hours(1)},
      .request_id = "r1",
      .cordoned = true,
      .scope = EpisodeScope::kGpu,
      .devices = {{.uuid = "GPU-0",
                   .driver = "gpu.nvidia.com",
                   .pool = "n1",
                   .device = "gpu-7",
                   .rule = "vigil-n1-gpu-7"}},
      .node_tainted = true,
      .drain = {{.id = "ml/a", .outcome = DrainPodOutcome::kBlocked, .attempts = 3},
                {.id = "ml/b", .outcome = DrainPodOutcome::kDeleted}},
      .drain_rounds = 3,
      .drain_next = kTime + absl::Seconds(8),
      .message = "evicting"};
  auto parsed = ParseRemediation(RemediationToJson(state));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->step, RemediationStep::kDraining);
  EXPECT_EQ(parsed->gpus, state.gpus);
  EXPECT_EQ(parsed->attempts, state.attempts);
  EXPECT_TRUE(parsed->cordoned);
  ASSERT_EQ(parsed->drain.size(), 2u);
  EXPECT_EQ(parsed->drain[0].outcome, DrainPodOutcome::kBlocked);
  EXPECT_EQ(parsed->drain[0].attempts, 3);
  EXPECT_EQ(parsed->drain[1].outcome, DrainPodOutcome::kDeleted);
  EXPECT_TRUE(IsDrained(parsed->drain[1].outcome));
  EXPECT_FALSE(IsDrained(parsed->drain[0].outcome));
  EXPECT_EQ(parsed->scope, EpisodeScope::kGpu);
  EXPECT_EQ(parsed->devices, state.devices);
  EXPECT_TRUE(parsed->node_tainted);
  EXPECT_EQ(parsed->drain_rounds, 3);
  EXPECT_EQ(parsed->drain_next, state.drain_next);
}

TEST(RemediationAnnotationsTest, AMangledValueSaysWhatIsWrong) {
  EXPECT_THAT(ParseFaults("not json").status().message(),
              HasSubstr("vigil.dev/gpu-faults annotation is not a JSON object"));
  EXPECT_THAT(
      ParseFaults(R"({"engine":"e","faults":[{"system":"memory","gpu":0}]})").status().message(),
      HasSubstr("GPU fault without a \"uuid\""));
  EXPECT_THAT(ParseFaults(R"({"engine":"e","faults":[{"system":"x","action":"explode"}]})")
                  .status()
                  .message(),
              HasSubstr("unknown \"action\": explode"));
  EXPECT_THAT(ParseRequest(R"({"id":""})").status().message(), HasSubstr("empty \"id\""));
  EXPECT_THAT(ParseResult(R"({"id":"a","outcome":"maybe"})").status().message(),
              HasSubstr("unknown \"outcome\": maybe"));
  EXPECT_THAT(ParseRemediation(R"({"step":"dancing"})").status().message(),
              HasSubstr("unknown \"step\": dancing"));
  EXPECT_THAT(ParseRemediation(R"({"step":"idle","attempts":["yesterday"]})").status().message(),
              HasSubstr("not an RFC 3339 time"));
}

}  // namespace
}  // namespace vigil
