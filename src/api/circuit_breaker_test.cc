// Tests of the published circuit breaker's format and decision (api/circuit_breaker.h).
#include "api/circuit_breaker.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

TEST(CircuitBreakerTest, OpensWhenOneMoreTaintWouldExceedTheShare) {
  EXPECT_EQ(DecideBreaker(0, 1, 0.5), BreakerState::kClosed) << "the first is always allowed";
  EXPECT_EQ(DecideBreaker(1, 2, 0.5), BreakerState::kOpen);
  EXPECT_EQ(DecideBreaker(1, 4, 0.5), BreakerState::kClosed);
  EXPECT_EQ(DecideBreaker(2, 4, 0.5), BreakerState::kOpen);
  EXPECT_EQ(DecideBreaker(4999, 10000, 0.5), BreakerState::kClosed);
  EXPECT_EQ(DecideBreaker(5000, 10000, 0.5), BreakerState::kOpen);
}

TEST(CircuitBreakerTest, CountsGpusOutOfServiceAsWellAsNodes) {
  // 3 nodes of 8 GPUs, share 0.1: at most 1 node, at most 2 GPUs.
  EXPECT_EQ(DecideBreaker(0, 3, 1, 24, 0.1), BreakerState::kClosed);
  EXPECT_EQ(DecideBreaker(0, 3, 2, 24, 0.1), BreakerState::kOpen) << "GPUs quarantined alone";
  EXPECT_EQ(DecideBreaker(1, 3, 0, 24, 0.1), BreakerState::kOpen) << "the nodes' limit";
  EXPECT_EQ(DecideBreaker(0, 3, 5, 0, 0.1), BreakerState::kClosed) << "no GPUs counted";
}

TEST(CircuitBreakerTest, DataRoundTripsAsStrings) {
  const PublishedBreaker breaker{.state = BreakerState::kOpen,
                                 .taint_key = "vigil.dev/gpu-problem",
                                 .tainted_nodes = 3,
                                 .gpu_nodes = 6,
                                 .max_tainted_nodes = 3,
                                 .out_of_service_gpus = 20,
                                 .gpus = 48,
                                 .max_out_of_service_gpus = 24,
                                 .max_tainted_share = 0.5,
                                 .changed = absl::FromUnixSeconds(1'800'000'000),
                                 .renewed = absl::FromUnixSeconds(1'800'000'300),
                                 .decided_by = "vigil-remediator-7c9"};
  const nlohmann::json data = BreakerToData(breaker);
  for (const auto& [key, value] : data.items()) EXPECT_TRUE(value.is_string()) << key;
  EXPECT_EQ(data["state"], "open");
  EXPECT_EQ(data["renewedAt"], "2027-01-15T08:05:00Z");
  auto back = BreakerFromData(data);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->SameDecision(breaker));
  EXPECT_EQ(back->changed, breaker.changed);
  EXPECT_EQ(back->renewed, breaker.renewed);
  EXPECT_EQ(back->decided_by, breaker.decided_by);
  EXPECT_EQ(back->out_of_service_gpus, 20u);
  EXPECT_EQ(back->gpus, 48u);
  // A remediator older than per-GPU quarantine writes no GPU counts: read as none.
  nlohmann::json older = data;
  for (const char* key : {"outOfServiceGpus", "gpus", "maxOutOfServiceGpus"}) older.erase(key);
  auto old = BreakerFromData(older);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->gpus, 0u);
}

TEST(CircuitBreakerTest, BadDataNamesTheKey) {
  nlohmann::json data = BreakerToData({.taint_key = "k", .max_tainted_share = 0.5});
  const struct {
    const char* key;
    nlohmann::json value;
    const char* said;
  } cases[] = {
      {"state", "half", "'state' is 'half'"},
      {"taintedNodes", "-1", "'taintedNodes' is not a count"},
      {"gpuNodes", 7, "'gpuNodes' is missing or not a string"},
      {"gpus", "many", "'gpus' is not a count"},
      {"maxTaintedShare", "1.5", "'maxTaintedShare' is not a share"},
      {"renewedAt", "yesterday", "'renewedAt' is not an RFC 3339 time"},
  };
  for (const auto& bad : cases) {
    nlohmann::json broken = data;
    broken[bad.key] = bad.value;
    auto parsed = BreakerFromData(broken);
    ASSERT_FALSE(parsed.ok()) << bad.key;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(bad.said));
  }
  nlohmann::json missing = data;
  missing.erase("decidedBy");
  EXPECT_FALSE(BreakerFromData(missing).ok());
  EXPECT_FALSE(BreakerFromData(nullptr).ok());
}

}  // namespace
}  // namespace vigil
