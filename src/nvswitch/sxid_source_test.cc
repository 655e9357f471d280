// Tests of the nvswitch source with the evaluator it reports to, as the engine composes them:
// SXids judged by the policy's rules into the node's nvswitch system.
#include "nvswitch/sxid_source.h"

#include <map>
#include <memory>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "health/evaluator.h"
#include "yaml-cpp/yaml.h"

namespace vigil::nvswitch {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class RecordingSink : public IncidentSink {
 public:
  void Raised(const Incident& incident) override {
    events.push_back(incident.key + " raised x" + std::to_string(incident.count));
  }
  void Cleared(const Incident& incident, std::string_view reason) override {
    events.push_back(incident.key + " cleared: " + std::string(reason));
  }
  void OperatorCleared(const OperatorClear& clear) override {
    events.push_back(fmt::format("operator clear of {} {}",
                                 clear.uuid.empty() ? "node" : clear.uuid,
                                 clear.system ? HealthSystemName(*clear.system) : "all"));
  }
  std::vector<std::string> events;
};

SxidEvent Sxid(uint32_t code, bool fatal, absl::Time time, uint32_t nvswitch = 1) {
  return {.nvswitch = nvswitch,
          .pci_bus_id = fmt::format("00000000:0{}:00.0", nvswitch + 5),
          .sxid = code,
          .fatal = fatal,
          .link = 48,
          .detail = "Link 48 LTSSM Fault Up",
          .time = time};
}

// The engine's part: the evaluator (with no GPUs: the switches are the node's), the source
// attached to it, a tick that judges the source and evaluates its report, a clear that tells it.
class SxidSourceTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(DefaultHealthPolicy()); }

  void Make(HealthPolicy policy, RestoredHealth restored = {}) {
    layout_ = std::make_shared<const FieldLayout>(std::vector<const FieldInfo*>{});
    health_ = std::make_unique<HealthEvaluator>(policy, layout_, std::vector<GpuIdentity>{},
                                                std::vector<absl::Duration>{}, &sink_,
                                                std::move(restored));
    source_ = std::make_unique<SxidSource>(
        policy, [this] { return log_state_; },
        [this](const std::string& key, const LogPosition& position) {
          return health_->CountsRecord(std::nullopt, key, position);
        });
    health_->AttachSource(HealthSystem::kNvswitch);
    source_->Cleared(std::nullopt, health_->LastClear(std::nullopt, HealthSystem::kNvswitch));
    now_ = kT0;
    seq_ = 0;
  }

  void Tick(absl::Duration step = absl::Seconds(1)) {
    now_ += step;
    Snapshot snapshot;
    snapshot.seq = ++seq_;
    snapshot.time = now_;
    snapshot.layout = layout_;
    verdict_ = health_->Evaluate(snapshot, now_, &transitions_, source_->Judge(now_));
  }

  void ClearNode() {
    health_->ClearNode(std::nullopt, "cleared by uid 0", now_);
    source_->Cleared(std::nullopt, now_);
  }

  const SystemHealth& Nvswitch() const {
    EXPECT_EQ(verdict_->node_systems.size(), 1u);
    return verdict_->node_systems.at(0);
  }

  RecordingSink sink_;
  kmsg::LogState log_state_ = kmsg::LogState::kReading;
  std::shared_ptr<const FieldLayout> layout_;
  std::unique_ptr<HealthEvaluator> health_;
  std::unique_ptr<SxidSource> source_;
  absl::Time now_;
  uint64_t seq_ = 0;
  std::shared_ptr<const HealthVerdict> verdict_;
  std::vector<HealthTransition> transitions_;
};

TEST_F(SxidSourceTest, TheSystemIsUnknownWhileTheKernelLogCannotBeRead) {
  log_state_ = kmsg::LogState::kNotStarted;
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kUnknown);
  log_state_ = kmsg::LogState::kReading;
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass);
  EXPECT_EQ(verdict_->overall, HealthStatus::kPass);
  transitions_.clear();
  log_state_ = kmsg::LogState::kUnreadable;
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kUnknown);
  EXPECT_THAT(Nvswitch().unknown_reason, HasSubstr("CAP_SYSLOG"));
  EXPECT_EQ(verdict_->overall, HealthStatus::kUnknown) << "never healthy what cannot be seen";
  ASSERT_EQ(transitions_.size(), 1u);
  EXPECT_TRUE(transitions_[0].node_level);
  EXPECT_EQ(transitions_[0].from, HealthStatus::kPass);
  EXPECT_EQ(transitions_[0].to, HealthStatus::kUnknown);
  log_state_ = kmsg::LogState::kAbsent;
  Tick();
  EXPECT_THAT(Nvswitch().unknown_reason, HasSubstr("the kernel log is absent"));
}

TEST_F(SxidSourceTest, AFatalSxidFailsTheNodeAndANonFatalOneWarnsUntilItsWindowEnds) {
  Tick();
  EXPECT_TRUE(source_->OnSxid(Sxid(22013, /*fatal=*/false, now_, /*nvswitch=*/3)));
  Tick();
  ASSERT_EQ(Nvswitch().incidents.size(), 1u);
  const Incident& warning = Nvswitch().incidents[0];
  EXPECT_EQ(warning.status, HealthStatus::kWarn);
  EXPECT_EQ(warning.code, "DCGM_FR_NVSWITCH_NON_FATAL_ERROR");
  EXPECT_TRUE(warning.node_level);
  EXPECT_EQ(warning.uuid, "");
  EXPECT_EQ(warning.key, "sxid.22013.00000000:08:00.0");
  EXPECT_THAT(warning.message, HasSubstr("NVSwitch 3 (00000000:08:00.0): SXid 22013, link 48"));
  EXPECT_THAT(warning.message, HasSubstr("(Link 48 LTSSM Fault Up)"));
  EXPECT_EQ(verdict_->overall, HealthStatus::kWarn);
  EXPECT_TRUE(sink_.events.empty()) << "a warning is not persisted";

  source_->OnSxid(Sxid(20034, /*fatal=*/true, now_));
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kFail);
  EXPECT_EQ(verdict_->overall, HealthStatus::kFail);
  EXPECT_THAT(sink_.events, ::testing::ElementsAre("sxid.20034.00000000:06:00.0 raised x1"));
  ASSERT_FALSE(transitions_.empty());
  EXPECT_TRUE(transitions_.back().node_level);
  EXPECT_THAT(transitions_.back().summary, HasSubstr("DCGM_FR_NVSWITCH_FATAL_ERROR"));
  for (const Incident& incident : Nvswitch().incidents) {
    if (incident.status == HealthStatus::kFail) {
      EXPECT_EQ(incident.recommended, RecommendedAction::kReboot);
    }
  }

  Tick(absl::Hours(1));  // the warning's window passed; the failure is sticky
  ASSERT_EQ(Nvswitch().incidents.size(), 1u);
  EXPECT_EQ(Nvswitch().incidents[0].code, "DCGM_FR_NVSWITCH_FATAL_ERROR");

  EXPECT_TRUE(health_->ClearNode(HealthSystem::kDriver, "test", now_).empty())
      << "driver is a GPU's system";
  ClearNode();
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass);
  EXPECT_THAT(sink_.events,
              ::testing::IsSupersetOf({"sxid.20034.00000000:06:00.0 cleared: cleared by uid 0",
                                       "operator clear of node all"}));
}

TEST_F(SxidSourceTest, ACountRuleWarnsAtItsCountAndAClearStartsItAgain) {
  HealthPolicy policy = DefaultHealthPolicy();
  ASSERT_TRUE(
      ApplyHealthConfig(YAML::Load("sxid: {\"22013\": {severity: count, count: 3, window: 10m}}"),
                        "e.yaml", &policy)
          .ok());
  Make(policy);
  Tick();
  for (int i = 0; i < 2; ++i) source_->OnSxid(Sxid(22013, false, now_));
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass) << "two of three";
  source_->OnSxid(Sxid(22013, false, now_));
  Tick();
  ASSERT_EQ(Nvswitch().status, HealthStatus::kWarn);
  EXPECT_THAT(Nvswitch().incidents[0].message, HasSubstr("(3 in the last 10m, warning at 3)"));
  ClearNode();
  Tick();
  source_->OnSxid(Sxid(22013, false, now_));
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass) << "one after the clear is one, not four";
  source_->OnSxid(Sxid(22013, false, now_ - absl::Minutes(20)));  // past its window: history
  source_->OnSxid(Sxid(22013, false, now_));
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass) << "two in the window";
}

TEST_F(SxidSourceTest, WhatHappenedBeforeAnOperatorsClearIsNotRaisedAgainEvenAfterARestart) {
  Tick();
  const absl::Time sxid_time = now_;
  source_->OnSxid(Sxid(20034, true, sxid_time));
  Tick();
  ASSERT_EQ(Nvswitch().status, HealthStatus::kFail);
  const absl::Time cleared = now_;
  ClearNode();
  // The same line again, as a kernel log replayed after its replay state was lost brings it.
  source_->OnSxid(Sxid(20034, true, sxid_time));
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass);

  // The clear survives a restart (the store hands it back, the engine hands it to the source).
  Make(DefaultHealthPolicy(), {.clears = {{.uuid = "", .system = std::nullopt, .time = cleared}}});
  now_ = cleared + absl::Seconds(30);
  Tick();
  source_->OnSxid(Sxid(20034, true, sxid_time));
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass);
  source_->OnSxid(Sxid(20034, true, now_));  // a new one counts
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kFail);
}

TEST_F(SxidSourceTest, ARecordTheIncidentAlreadyCountsIsDroppedAfterARestart) {
  Tick();
  SxidEvent fatal = Sxid(20034, true, now_);
  fatal.log_position = LogPosition{.source = "kmsg", .sequence = 12};
  EXPECT_TRUE(source_->OnSxid(fatal));
  Tick();
  ASSERT_EQ(Nvswitch().status, HealthStatus::kFail);
  const Incident kept = Nvswitch().incidents.at(0);
  EXPECT_EQ(kept.log_position, fatal.log_position);

  // A restart restores the FAIL with its record; the log is read again from its start.
  Make(DefaultHealthPolicy(), {.incidents = {kept}});
  Tick();
  EXPECT_FALSE(source_->OnSxid(fatal)) << "already counted before the restart";
  SxidEvent earlier = Sxid(20034, true, now_);
  earlier.log_position = LogPosition{.source = "kmsg", .sequence = 3};
  EXPECT_FALSE(source_->OnSxid(earlier)) << "an earlier record of the same log";
  Tick();
  EXPECT_EQ(Nvswitch().incidents.at(0).count, 1u);
  SxidEvent later = Sxid(20034, true, now_);
  later.log_position = LogPosition{.source = "kmsg", .sequence = 13};
  EXPECT_TRUE(source_->OnSxid(later)) << "a new record counts";
  Tick();
  EXPECT_EQ(Nvswitch().incidents.at(0).count, 2u);
}

TEST_F(SxidSourceTest, AnIgnoredSxidRaisesNothing) {
  HealthPolicy policy = DefaultHealthPolicy();
  ASSERT_TRUE(
      ApplyHealthConfig(YAML::Load("sxid: {\"12028\": {severity: ignore}}"), "e.yaml", &policy)
          .ok());
  Make(policy);
  Tick();
  source_->OnSxid(Sxid(12028, /*fatal=*/true, now_));
  Tick();
  EXPECT_EQ(Nvswitch().status, HealthStatus::kPass);
  EXPECT_TRUE(Nvswitch().incidents.empty());
}

}  // namespace
}  // namespace vigil::nvswitch
