// Tests of RunSubprocess and ExpandCommand: real child processes.
#include "common/subprocess.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

TEST(SubprocessTest, ReportsTheExitStatusAndBothOutputs) {
  auto result =
      RunSubprocess({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, absl::Seconds(20));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_FALSE(result->timed_out);
  EXPECT_THAT(result->output, HasSubstr("out\n"));
  EXPECT_THAT(result->output, HasSubstr("err\n"));
}

TEST(SubprocessTest, FindsTheProgramOnThePath) {
  auto result = RunSubprocess({"true"}, absl::Seconds(20));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
}

TEST(SubprocessTest, AMissingProgramIsExitCode127WithTheReason) {
  auto result = RunSubprocess({"/nonexistent/vigil-no-such-program"}, absl::Seconds(20));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 127);
  EXPECT_THAT(result->output, HasSubstr("No such file or directory"));
}

TEST(SubprocessTest, AChildPastTheLimitIsKilledWithWhatItStarted) {
  // The grandchild holds the pipe open too: killing only the child would leave the read waiting.
  auto result = RunSubprocess({"/bin/sh", "-c", "echo started; sleep 60 & sleep 60"},
                              absl::Milliseconds(300));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->exit_code, 128 + 9);
  EXPECT_THAT(result->output, HasSubstr("started"));
}

TEST(SubprocessTest, WhatItLeftRunningInTheBackgroundDoesNotHoldItsResult) {
  // The background sleep keeps the output pipe open after the command itself has exited.
  const absl::Time start = absl::Now();
  auto result = RunSubprocess({"/bin/sh", "-c", "echo done; sleep 3 &"}, absl::Seconds(20));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->timed_out);
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_THAT(result->output, HasSubstr("done"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << "returned when the command exited";
}

TEST(SubprocessTest, OutputIsCappedNotUnbounded) {
  auto result =
      RunSubprocess({"/bin/sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"}, absl::Seconds(20));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->output.size(), kMaxSubprocessOutput);
}

TEST(SubprocessTest, AnEmptyArgvIsRefused) {
  EXPECT_EQ(RunSubprocess({}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExpandCommandTest, SplitsOnBlanksAndSubstitutesPlaceholders) {
  auto argv =
      ExpandCommand("nvidia-smi  --gpu-reset -i {uuid}", {{"uuid", "GPU-1234"}, {"index", "0"}});
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ::testing::ElementsAre("nvidia-smi", "--gpu-reset", "-i", "GPU-1234"));
  auto joined = ExpandCommand("/bin/reset gpu={index}:{uuid}", {{"uuid", "U"}, {"index", "3"}});
  ASSERT_TRUE(joined.ok());
  EXPECT_THAT(*joined, ::testing::ElementsAre("/bin/reset", "gpu=3:U"));
}

TEST(ExpandCommandTest, RefusesWhatItCannotSplitSafely) {
  EXPECT_THAT(ExpandCommand("sh -c 'reboot now'", {}).status().message(), HasSubstr("no quoting"));
  EXPECT_THAT(ExpandCommand("reset {serial}", {{"uuid", "U"}}).status().message(),
              HasSubstr("unknown placeholder {serial}; it may use {uuid}"));
  EXPECT_THAT(ExpandCommand("reset {uuid", {{"uuid", "U"}}).status().message(),
              HasSubstr("without"));
  EXPECT_EQ(ExpandCommand("   ", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FirstLineTest, TakesTheFirstNonBlankLine) {
  EXPECT_EQ(FirstLine("\nGPU reset\nmore"), "GPU reset");
  EXPECT_EQ(FirstLine(""), "(no output)");
}

}  // namespace
}  // namespace vigil
