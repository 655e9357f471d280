// Tests for the health engine on hand-built snapshots: every rule just below and just above its
// threshold, the XID policy, de-duplication, expiry, stickiness, UNKNOWN, resets, clears and
// transitions; every rule's inputs making its system UNKNOWN; the policy's config overrides.
// (The incident store has its own tests: incident_store_test.cc.)
#include "health/evaluator.h"

#include <cctype>
#include <set>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "health/rules.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class HealthTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(DefaultHealthPolicy()); }

  void Make(HealthPolicy policy, IncidentSink* sink = nullptr, RestoredHealth restored = {}) {
    std::vector<const FieldInfo*> fields;
    std::vector<absl::Duration> intervals;
    for (const FieldInfo& field : AllFields()) {
      fields.push_back(&field);
      intervals.push_back(absl::Seconds(1));
    }
    layout_ = std::make_shared<const FieldLayout>(fields);
    std::vector<GpuIdentity> gpus = {{.index = 0, .uuid = "GPU-0"}, {.index = 1, .uuid = "GPU-1"}};
    health_ = std::make_unique<HealthEvaluator>(std::move(policy), layout_, gpus, intervals, sink,
                                                std::move(restored));
    // Healthy readings: Gen5 x16, ECC on, infoROM valid, every counter at a baseline.
    values_.assign(2, {});
    for (uint32_t gpu = 0; gpu < 2; ++gpu) {
      for (const FieldInfo& field : AllFields()) {
        values_[gpu][field.id] = field.type == FieldType::kString   ? FieldValue::String("x")
                                 : field.type == FieldType::kDouble ? FieldValue::Double(1)
                                                                    : FieldValue::Int(0);
      }
      values_[gpu][fid::kPcieLinkGen] = FieldValue::Int(5);
      values_[gpu][fid::kPcieLinkWidth] = FieldValue::Int(16);
      values_[gpu][fid::kInforomConfigValid] = FieldValue::Int(1);
      values_[gpu][fid::kTotalEnergy] = FieldValue::Int(1'000'000);
    }
    now_ = kT0;
    seq_ = 0;
    transitions_.clear();
  }

  // One tick, `step` after the last, with the current values (all freshly sampled).
  std::shared_ptr<const HealthVerdict> Tick(absl::Duration step = absl::Seconds(1)) {
    now_ += step;
    Snapshot snapshot;
    snapshot.seq = ++seq_;
    snapshot.time = now_;
    snapshot.gpu_count = 2;
    snapshot.layout = layout_;
    snapshot.values.resize(2 * layout_->size());
    for (uint32_t gpu = 0; gpu < 2; ++gpu) {
      for (size_t i = 0; i < layout_->size(); ++i) {
        snapshot.values[gpu * layout_->size() + i] = {values_[gpu][layout_->field(i).id], seq_,
                                                      now_};
      }
    }
    snapshot.gpu_read = gpu_read_;
    snapshot.injection_allows_actions = allows_actions_;
    if (stale_field_) {
      snapshot.values[*layout_->IndexOf(*stale_field_)].sample_time = now_ - absl::Minutes(5);
    }
    verdict_ = health_->Evaluate(snapshot, now_, &transitions_, std::exchange(reports_, {}));
    return verdict_;
  }

  // Sets a value on GPU 0, optionally as a counter increase over the previous tick.
  void Set(FieldId field, int64_t value) { values_[0][field] = FieldValue::Int(value); }
  void Add(FieldId field, int64_t amount) {
    values_[0][field] = FieldValue::Int(values_[0][field].as_int() + amount);
  }

  HealthStatus System(HealthSystem system, uint32_t gpu = 0) const {
    return verdict_->gpus[gpu].systems[static_cast<size_t>(system)].status;
  }
  const std::vector<Incident>& Incidents(HealthSystem system, uint32_t gpu = 0) const {
    return verdict_->gpus[gpu].systems[static_cast<size_t>(system)].incidents;
  }

  std::shared_ptr<const FieldLayout> layout_;
  std::unique_ptr<HealthEvaluator> health_;
  std::vector<std::map<FieldId, FieldValue>> values_;
  absl::Time now_;
  uint64_t seq_ = 0;
  std::optional<FieldId> stale_field_;
  std::vector<ValueStatus> gpu_read_ = {ValueStatus::kOk, ValueStatus::kOk};
  std::vector<bool> allows_actions_ = {false, false};
  std::vector<SourceReport> reports_;  // the sources' reports the next Tick() hands over
  std::shared_ptr<const HealthVerdict> verdict_;
  std::vector<HealthTransition> transitions_;
};

// What the evaluator hands its sink (the incident store): every FAIL incident when raised and
// when it counts again, each clear with its reason, and no WARN.
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

TEST_F(HealthTest, HealthyDataPassesEverywhereWithTheTicksSeq) {
  Tick();
  EXPECT_EQ(verdict_->overall, HealthStatus::kPass);
  EXPECT_EQ(verdict_->seq, 1u);
  ASSERT_EQ(verdict_->gpus.size(), 2u);
  EXPECT_EQ(verdict_->gpus[1].systems.size(), 7u) << "no network: nothing reads NIC ports";
  EXPECT_EQ(health_->Latest(), verdict_);
}

// A source's findings (the NIC ports', network/) become incidents of the GPUs they name, with
// the DCGM rules' lifecycle: the other GPU stays PASS; a finding not sticky ends with its
// condition, after its expiry; a sticky FAIL stays, even across a GPU reset (a NIC port does not
// reset with the GPU), until an operator's clear.
TEST_F(HealthTest, ASourcesFindingsAreIncidentsOfTheGpusTheyName) {
  RecordingSink sink;
  Make(DefaultHealthPolicy(), &sink);
  health_->AttachSource(HealthSystem::kNetwork);
  const auto network = static_cast<size_t>(HealthSystem::kNetwork);
  reports_ = {{.system = HealthSystem::kNetwork}};
  Tick();
  ASSERT_EQ(verdict_->gpus[1].systems.size(), 8u);
  EXPECT_EQ(verdict_->gpus[1].systems[network].system, HealthSystem::kNetwork);
  EXPECT_EQ(System(HealthSystem::kNetwork, 1), HealthStatus::kPass);

  SourceFinding down{.gpus = {1},
                     .status = HealthStatus::kFail,
                     .key = "network.state.mlx5_1/1",
                     .code = "VIGIL_FR_NET_PORT_DOWN",
                     .message = "port mlx5_1/1 is DOWN",
                     .action = "check the cable",
                     .sticky = false,
                     .expire_after = absl::Seconds(5)};
  reports_ = {{.system = HealthSystem::kNetwork, .findings = {down}}};
  Tick();
  EXPECT_EQ(System(HealthSystem::kNetwork, 1), HealthStatus::kFail);
  EXPECT_EQ(System(HealthSystem::kNetwork, 0), HealthStatus::kPass);
  ASSERT_EQ(transitions_.size(), 1u);
  EXPECT_EQ(transitions_[0].gpu, 1u);
  EXPECT_EQ(transitions_[0].system, HealthSystem::kNetwork);
  EXPECT_EQ(transitions_[0].summary, "VIGIL_FR_NET_PORT_DOWN: port mlx5_1/1 is DOWN");
  Tick();  // still reported (a tick without a report keeps the last one)
  EXPECT_EQ(Incidents(HealthSystem::kNetwork, 1).at(0).count, 1u) << "one onset, not one per tick";

  reports_ = {{.system = HealthSystem::kNetwork}};
  Tick();
  EXPECT_EQ(System(HealthSystem::kNetwork, 1), HealthStatus::kFail) << "until its expiry";
  Tick(absl::Seconds(5));
  EXPECT_EQ(System(HealthSystem::kNetwork, 1), HealthStatus::kPass);
  EXPECT_EQ(sink.events, (std::vector<std::string>{
                             "network.state.mlx5_1/1 raised x1",
                             "network.state.mlx5_1/1 cleared: the condition no longer holds"}));

  SourceFinding errors{.gpus = {0, 1},
                       .status = HealthStatus::kFail,
                       .key = "network.symbol_error.mlx5_0/1",
                       .code = "VIGIL_FR_NET_SYMBOL_ERRORS",
                       .message = "symbol errors"};
  reports_ = {{.system = HealthSystem::kNetwork, .findings = {errors}}};
  Tick();
  reports_ = {{.system = HealthSystem::kNetwork}};
  Tick(absl::Hours(1));
  EXPECT_EQ(System(HealthSystem::kNetwork, 0), HealthStatus::kFail) << "sticky";
  EXPECT_EQ(System(HealthSystem::kNetwork, 1), HealthStatus::kFail);
  Set(fid::kEccSbeVolTotal, -1);  // volatile counters went back: GPU 0 was reset
  Tick();
  EXPECT_EQ(System(HealthSystem::kNetwork, 0), HealthStatus::kFail) << "the NIC did not reset";
  EXPECT_EQ(health_->Clear(0, HealthSystem::kNetwork, "cable replaced", now_).size(), 1u);
  Tick();
  EXPECT_EQ(System(HealthSystem::kNetwork, 0), HealthStatus::kPass);
  EXPECT_EQ(System(HealthSystem::kNetwork, 1), HealthStatus::kFail);
}

// What a source cannot read for a GPU makes that GPU's system UNKNOWN, never PASS; before its
// first report too.
TEST_F(HealthTest, WhatASourceCannotReadIsUnknownForTheGpusItServes) {
  health_->AttachSource(HealthSystem::kNetwork);
  Tick();
  EXPECT_EQ(System(HealthSystem::kNetwork, 0), HealthStatus::kUnknown);
  reports_ = {
      {.system = HealthSystem::kNetwork, .unknown = {"", "port mlx5_1/1: state: garbled ('9x')"}}};
  Tick();
  EXPECT_EQ(System(HealthSystem::kNetwork, 0), HealthStatus::kPass);
  EXPECT_EQ(System(HealthSystem::kNetwork, 1), HealthStatus::kUnknown);
  EXPECT_EQ(verdict_->gpus[1].systems[static_cast<size_t>(HealthSystem::kNetwork)].unknown_reason,
            "port mlx5_1/1: state: garbled ('9x')");
}

// The fabric manager's state ends without a reset: its FAIL lasts while it holds (and the window
// after, as a WARN's does), where a volatile DBE's stays until a reset.
TEST_F(HealthTest, AFabricNotTrainedFailsWhileItHoldsAndNoLonger) {
  Set(fid::kFabricManagerStatus, 1);  // not started
  Tick();
  ASSERT_EQ(System(HealthSystem::kNvlink), HealthStatus::kFail);
  EXPECT_EQ(Incidents(HealthSystem::kNvlink)[0].code, "DCGM_FR_FABRIC_PROBE_STATE");
  EXPECT_FALSE(Incidents(HealthSystem::kNvlink)[0].sticky);
  Set(fid::kFabricManagerStatus, 3);  // trained
  Add(fid::kEccDbeVolTotal, 1);       // and a sticky failure beside it
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kFail);
  now_ += DefaultHealthPolicy().window + absl::Seconds(1);
  Tick();
  EXPECT_EQ(System(HealthSystem::kNvlink), HealthStatus::kPass);
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kFail) << "sticky until a reset";
  // A degraded fabric: each fault of the health mask named.
  Set(fid::kFabricHealthMask, (1 << 0) | (2 << 2) | (1 << 6) | (3 << 8));
  Tick();
  ASSERT_EQ(System(HealthSystem::kNvlink), HealthStatus::kFail);
  EXPECT_EQ(Incidents(HealthSystem::kNvlink)[0].code, "DCGM_FR_FIELD_VIOLATION");
  EXPECT_EQ(Incidents(HealthSystem::kNvlink)[0].message,
            "Fabric Health: Bandwidth Degraded, Access Timeout Recovery, Incorrect Configuration "
            "(3) (health mask 0x349)");
}

TEST_F(HealthTest, BeforeTheFirstEvaluationEverythingIsUnknown) {
  EXPECT_EQ(health_->Latest()->overall, HealthStatus::kUnknown);
}

// Counter rules: a window delta just below and just above each threshold.
struct CounterCase {
  const char* name;
  FieldId field;
  int64_t below, above;
  HealthSystem system;
  HealthStatus status;
  const char* code;
};

class HealthCounterRuleTest : public HealthTest,
                              public ::testing::WithParamInterface<CounterCase> {};

TEST_P(HealthCounterRuleTest, FiresOnlyAboveItsThreshold) {
  const CounterCase& c = GetParam();
  Tick();  // the baseline
  Add(c.field, c.below);
  Tick();
  EXPECT_EQ(System(c.system), HealthStatus::kPass) << c.name << " fired at " << c.below;
  Make(DefaultHealthPolicy());
  Tick();
  Add(c.field, c.above);
  Tick();
  EXPECT_EQ(System(c.system), c.status) << c.name << " at " << c.above;
  ASSERT_FALSE(Incidents(c.system).empty());
  EXPECT_EQ(Incidents(c.system)[0].code, c.code);
  EXPECT_FALSE(Incidents(c.system)[0].message.empty());
  EXPECT_FALSE(Incidents(c.system)[0].action.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Rules, HealthCounterRuleTest,
    ::testing::Values(
        // Gen5 x16: 1.92 replays per lane per minute x 16 lanes = 30.72 in 60 s.
        CounterCase{"pcie", fid::kPcieReplayCounter, 30, 31, HealthSystem::kPcie,
                    HealthStatus::kWarn, "DCGM_FR_PCI_REPLAY_RATE"},
        // Any thermal throttling (DCGM's rule).
        CounterCase{"thermal", fid::kThermalViolation, 0, 1, HealthSystem::kThermal,
                    HealthStatus::kWarn, "DCGM_FR_CLOCKS_EVENT_THERMAL"},
        // Power: 10% of the 60 s window = 6 s throttled.
        CounterCase{"power", fid::kPowerViolation, 5'999'999'999, 6'000'000'000,
                    HealthSystem::kPower, HealthStatus::kWarn, "DCGM_FR_CLOCKS_EVENT_POWER"},
        CounterCase{"nvlink crc", fid::kNvlinkCrcFlitErrors, 0, 1, HealthSystem::kNvlink,
                    HealthStatus::kWarn, "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD"},
        CounterCase{"nvlink replay", fid::kNvlinkReplayErrors, 0, 1, HealthSystem::kNvlink,
                    HealthStatus::kFail, "DCGM_FR_NVLINK_ERROR_THRESHOLD"},
        CounterCase{"nvlink recovery", fid::kNvlinkRecoveryErrors, 0, 1, HealthSystem::kNvlink,
                    HealthStatus::kFail, "DCGM_FR_NVLINK_ERROR_THRESHOLD"}));

TEST_F(HealthTest, NvlinkCrcRateFailsAtOneHundredPerSecond) {
  Tick();
  Add(fid::kNvlinkCrcFlitErrors, 99);  // 99 in 1 s
  Tick();
  EXPECT_EQ(System(HealthSystem::kNvlink), HealthStatus::kWarn);
  Make(DefaultHealthPolicy());
  Tick();
  Add(fid::kNvlinkCrcDataErrors, 100);  // data CRC counts too
  Tick();
  EXPECT_EQ(System(HealthSystem::kNvlink), HealthStatus::kFail);
  EXPECT_EQ(Incidents(HealthSystem::kNvlink)[0].code, "DCGM_FR_NVLINK_ERROR_CRITICAL");
}

TEST_F(HealthTest, PowerThrottlingSpreadOverTheWindowCounts) {
  Tick();
  // 0.15 s of every second for a minute: 15% of the window.
  for (int i = 0; i < 60; ++i) {
    Add(fid::kPowerViolation, 150'000'000);
    Tick();
  }
  EXPECT_EQ(System(HealthSystem::kPower), HealthStatus::kWarn);
  EXPECT_THAT(Incidents(HealthSystem::kPower)[0].message, HasSubstr("9.0 s of the last 1m"));
}

// Level rules: a value just below and at/above each threshold.
struct LevelCase {
  const char* name;
  FieldId field;
  int64_t healthy, unhealthy;
  HealthSystem system;
  HealthStatus status;
  const char* code;
};

class HealthLevelRuleTest : public HealthTest, public ::testing::WithParamInterface<LevelCase> {};

TEST_P(HealthLevelRuleTest, FiresOnlyPastItsThreshold) {
  const LevelCase& c = GetParam();
  Set(c.field, c.healthy);
  Tick();
  EXPECT_EQ(System(c.system), HealthStatus::kPass) << c.name;
  Set(c.field, c.unhealthy);
  Tick();
  EXPECT_EQ(System(c.system), c.status) << c.name;
  ASSERT_FALSE(Incidents(c.system).empty());
  EXPECT_EQ(Incidents(c.system)[0].code, c.code);
  EXPECT_EQ(System(c.system, 1), HealthStatus::kPass) << "the other GPU";
}

INSTANTIATE_TEST_SUITE_P(
    Rules, HealthLevelRuleTest,
    ::testing::Values(
        LevelCase{"volatile dbe", fid::kEccDbeVolTotal, 0, 1, HealthSystem::kMemory,
                  HealthStatus::kFail, "DCGM_FR_VOLATILE_DBE_DETECTED"},
        LevelCase{"pending retirement", fid::kRetiredPending, 0, 1, HealthSystem::kMemory,
                  HealthStatus::kWarn, "DCGM_FR_PENDING_PAGE_RETIREMENTS"},
        LevelCase{"retired sbe", fid::kRetiredSbe, 62, 63, HealthSystem::kMemory,
                  HealthStatus::kFail, "DCGM_FR_RETIRED_PAGES_LIMIT"},
        LevelCase{"retired dbe", fid::kRetiredDbe, 15, 16, HealthSystem::kMemory,
                  HealthStatus::kFail, "DCGM_FR_RETIRED_PAGES_DBE_LIMIT"},
        LevelCase{"row remap failure", fid::kRowRemapFailure, 0, 1, HealthSystem::kMemory,
                  HealthStatus::kFail, "DCGM_FR_ROW_REMAP_FAILURE"},
        LevelCase{"uncorrectable rows", fid::kUncorrectableRemappedRows, 511, 512,
                  HealthSystem::kMemory, HealthStatus::kWarn, "DCGM_FR_UNCORRECTABLE_ROW_REMAP"},
        LevelCase{"unrepairable", fid::kMemoryUnrepairable, 0, 1, HealthSystem::kMemory,
                  HealthStatus::kFail, "DCGM_FR_FAULTY_MEMORY"},
        LevelCase{"inforom", fid::kInforomConfigValid, 1, 0, HealthSystem::kInforom,
                  HealthStatus::kWarn, "DCGM_FR_CORRUPT_INFOROM"},
        LevelCase{"recovery reset", fid::kGpuRecoveryAction, 0, 1, HealthSystem::kDriver,
                  HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_RESET"},
        LevelCase{"recovery reboot", fid::kGpuRecoveryAction, 0, 2, HealthSystem::kDriver,
                  HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_REBOOT"},
        LevelCase{"recovery drain p2p", fid::kGpuRecoveryAction, 0, 3, HealthSystem::kDriver,
                  HealthStatus::kWarn, "DCGM_FR_GPU_RECOVERY_DRAIN_P2P"},
        LevelCase{"recovery drain reset", fid::kGpuRecoveryAction, 0, 4, HealthSystem::kDriver,
                  HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_DRAIN_RESET"}));

TEST_F(HealthTest, PcieAllowanceScalesWithGenerationAndWidth) {
  Set(fid::kPcieLinkGen, 3);    // 0.48 per lane per minute
  Set(fid::kPcieLinkWidth, 8);  // x8: 3.84 in 60 s
  Tick();
  Add(fid::kPcieReplayCounter, 3);
  Tick();
  EXPECT_EQ(System(HealthSystem::kPcie), HealthStatus::kPass);
  Add(fid::kPcieReplayCounter, 1);
  Tick();
  EXPECT_EQ(System(HealthSystem::kPcie), HealthStatus::kWarn);
  EXPECT_THAT(Incidents(HealthSystem::kPcie)[0].message, HasSubstr("Gen3 x8"));
}

TEST_F(HealthTest, XidPolicy) {
  struct Case {
    uint32_t xid;
    HealthSystem system;
    HealthStatus status;
  };
  const Case cases[] = {
      {79, HealthSystem::kDriver, HealthStatus::kFail},
      {48, HealthSystem::kMemory, HealthStatus::kFail},
      {64, HealthSystem::kMemory, HealthStatus::kFail},
      {74, HealthSystem::kNvlink, HealthStatus::kFail},
      {95, HealthSystem::kMemory, HealthStatus::kFail},
      {119, HealthSystem::kDriver, HealthStatus::kFail},
      {120, HealthSystem::kDriver, HealthStatus::kFail},
      {140, HealthSystem::kMemory, HealthStatus::kFail},
      {94, HealthSystem::kMemory, HealthStatus::kWarn},
      {999, HealthSystem::kDriver, HealthStatus::kWarn},
      {13, HealthSystem::kDriver, HealthStatus::kPass},
      {31, HealthSystem::kDriver, HealthStatus::kPass},
      {43, HealthSystem::kDriver, HealthStatus::kPass},
      {45, HealthSystem::kDriver, HealthStatus::kPass},
  };
  for (const Case& c : cases) {
    Make(DefaultHealthPolicy());
    Tick();
    health_->RecordXid(0, c.xid, now_, false);
    Tick();
    EXPECT_EQ(System(c.system), c.status) << "XID " << c.xid;
    EXPECT_EQ(verdict_->gpus[1].status, HealthStatus::kPass) << "XID " << c.xid;
    if (c.status == HealthStatus::kPass) {
      EXPECT_EQ(verdict_->overall, HealthStatus::kPass);
    }
  }
}

TEST_F(HealthTest, CountedXidsWarnAtTheirThreshold) {
  Tick();
  for (int i = 1; i <= 3; ++i) {
    health_->RecordXid(0, 63, now_, false);
    Tick();
    EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kPass) << i;
  }
  health_->RecordXid(0, 63, now_, false);
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kWarn);
  EXPECT_THAT(Incidents(HealthSystem::kMemory)[0].message, HasSubstr("4 in the last 1h"));
}

TEST_F(HealthTest, RepeatsUpdateOneIncidentAndFailIsSticky) {
  Tick();
  health_->RecordXid(0, 79, now_, true);
  Tick();
  const absl::Time first = now_;
  health_->RecordXid(0, 79, now_, true);
  health_->RecordXid(0, 79, now_, true);
  Tick();
  ASSERT_EQ(Incidents(HealthSystem::kDriver).size(), 1u);
  const Incident incident = Incidents(HealthSystem::kDriver)[0];
  EXPECT_EQ(incident.count, 3u);
  EXPECT_EQ(incident.first_seen, first);
  EXPECT_EQ(incident.last_seen, now_);
  EXPECT_TRUE(incident.injected);
  EXPECT_EQ(incident.uuid, "GPU-0");
  Tick(absl::Hours(5));
  EXPECT_EQ(System(HealthSystem::kDriver), HealthStatus::kFail) << "a FAIL never expires";
}

TEST_F(HealthTest, ConditionOnsetsAreCountedNotTicks) {
  Set(fid::kInforomConfigValid, 0);
  Tick();
  Tick();
  Tick();
  EXPECT_EQ(Incidents(HealthSystem::kInforom)[0].count, 1u);
  Set(fid::kInforomConfigValid, 1);
  Tick();
  Set(fid::kInforomConfigValid, 0);
  Tick();
  EXPECT_EQ(Incidents(HealthSystem::kInforom)[0].count, 2u);
}

TEST_F(HealthTest, WarnExpiresAWindowAfterItStopsHolding) {
  Tick();
  Add(fid::kThermalViolation, 1'000'000);
  Tick();
  EXPECT_EQ(System(HealthSystem::kThermal), HealthStatus::kWarn);
  Tick(absl::Seconds(30));  // the increase is still inside the window
  EXPECT_EQ(System(HealthSystem::kThermal), HealthStatus::kWarn);
  Tick(absl::Seconds(31));  // no violation in the last minute...
  Tick(absl::Seconds(61));  // ...and a window since it was last seen
  EXPECT_EQ(System(HealthSystem::kThermal), HealthStatus::kPass);
}

TEST_F(HealthTest, MissingOrStaleDataIsUnknownNeverPass) {
  values_[0][fid::kEccDbeVolTotal] = FieldValue::Error(ValueStatus::kNoData);
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kUnknown);
  EXPECT_THAT(verdict_->gpus[0].systems[1].unknown_reason, HasSubstr("no data yet"));
  EXPECT_EQ(verdict_->overall, HealthStatus::kUnknown);
  values_[0][fid::kEccDbeVolTotal] = FieldValue::Int(0);
  stale_field_ = fid::kThermalViolation;  // GPU 0's last read 5 minutes ago
  Tick();
  EXPECT_EQ(System(HealthSystem::kThermal), HealthStatus::kUnknown);
  EXPECT_THAT(verdict_->gpus[0].systems[3].unknown_reason, HasSubstr("stale"));
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kPass);
  stale_field_.reset();
  values_[0][fid::kEccDbeVolTotal] = FieldValue::Error(ValueStatus::kTimeout);
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kUnknown);
}

// Every rule, every input: when that input is stale or has no data, the rule's system is
// UNKNOWN (never PASS), and says which field. The inputs come from the rule table itself.
struct RuleInput {
  const HealthRule* rule;
  FieldId field;
};

std::vector<RuleInput> EveryRuleInput() {
  std::vector<RuleInput> cases;
  for (const HealthRule& rule : HealthRules()) {
    for (FieldId field : rule.inputs) cases.push_back({&rule, field});
  }
  return cases;
}

class HealthRuleInputTest : public HealthTest, public ::testing::WithParamInterface<RuleInput> {};

TEST_P(HealthRuleInputTest, AStaleOrMissingInputMakesItsSystemUnknown) {
  const RuleInput input = GetParam();
  const std::string name(FindField(input.field)->name);
  Tick();
  ASSERT_EQ(System(input.rule->system), HealthStatus::kPass);
  stale_field_ = input.field;
  Tick();
  EXPECT_EQ(System(input.rule->system), HealthStatus::kUnknown) << name << " stale";
  EXPECT_THAT(verdict_->gpus[0].systems[static_cast<size_t>(input.rule->system)].unknown_reason,
              HasSubstr(name + " is stale"));
  EXPECT_EQ(verdict_->gpus[1].status, HealthStatus::kPass);  // the other GPU is fresh
  stale_field_.reset();
  Tick();
  EXPECT_EQ(System(input.rule->system), HealthStatus::kPass);
  values_[0][input.field] = FieldValue::Error(ValueStatus::kNoData);
  Tick();
  EXPECT_EQ(System(input.rule->system), HealthStatus::kUnknown) << name << " missing";
  EXPECT_THAT(verdict_->gpus[0].systems[static_cast<size_t>(input.rule->system)].unknown_reason,
              HasSubstr("no data yet for " + name));
}

INSTANTIATE_TEST_SUITE_P(EveryRule, HealthRuleInputTest, ::testing::ValuesIn(EveryRuleInput()),
                         [](const ::testing::TestParamInfo<RuleInput>& info) {
                           std::string name = std::string(info.param.rule->name) + "_" +
                                              std::string(FindField(info.param.field)->name);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(HealthRulesTest, EverySystemHasRulesAndItsInputsAreTheirs) {
  for (HealthSystem system : kGpuHealthSystems) {
    if (IsFromSource(system)) {  // judged by its source, never by a rule over the GPU's fields
      EXPECT_TRUE(InputsOf(system).empty()) << HealthSystemName(system);
      continue;
    }
    std::set<FieldId> from_rules;
    bool has_rule = false;
    for (const HealthRule& rule : HealthRules()) {
      if (rule.system != system) continue;
      has_rule = true;
      from_rules.insert(rule.inputs.begin(), rule.inputs.end());
    }
    EXPECT_TRUE(has_rule) << HealthSystemName(system);
    const std::vector<FieldId>& inputs = InputsOf(system);
    EXPECT_EQ(std::set<FieldId>(inputs.begin(), inputs.end()), from_rules)
        << HealthSystemName(system);
  }
}

TEST_F(HealthTest, UnsupportedFieldsAreNotJudged) {
  values_[0][fid::kRetiredSbe] = FieldValue::Error(ValueStatus::kNotSupported);
  values_[0][fid::kRetiredDbe] = FieldValue::Error(ValueStatus::kNotSupported);
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kPass);
}

TEST_F(HealthTest, LostGpuIsUnknownWithAFailIncident) {
  Tick();
  // As the engine does: the fields read at this tick fail, the others keep older values.
  values_[0][fid::kGpuTemp] = FieldValue::Error(ValueStatus::kGpuLost);
  gpu_read_[0] = ValueStatus::kGpuLost;
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kUnknown);
  EXPECT_EQ(System(HealthSystem::kPcie), HealthStatus::kUnknown);
  EXPECT_EQ(System(HealthSystem::kDriver), HealthStatus::kFail);
  EXPECT_THAT(verdict_->gpus[0].systems[1].unknown_reason, HasSubstr("lost"));
  EXPECT_EQ(verdict_->gpus[0].status, HealthStatus::kFail);
  EXPECT_EQ(verdict_->gpus[1].status, HealthStatus::kPass);
}

TEST_F(HealthTest, UnresponsiveGpuIsUnknownWithAWarnIncidentUntilItAnswers) {
  Tick();
  const auto healthy = values_[0];
  values_[0][fid::kGpuTemp] = FieldValue::Error(ValueStatus::kTimeout);
  gpu_read_[0] = ValueStatus::kTimeout;
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kUnknown);
  EXPECT_THAT(verdict_->gpus[0].systems[1].unknown_reason, HasSubstr("timed out"));
  const auto& driver = verdict_->gpus[0].systems[static_cast<size_t>(HealthSystem::kDriver)];
  ASSERT_EQ(driver.incidents.size(), 1u);
  EXPECT_EQ(driver.incidents[0].status, HealthStatus::kWarn);
  EXPECT_THAT(driver.incidents[0].message, HasSubstr("did not answer"));
  EXPECT_NE(verdict_->gpus[0].status, HealthStatus::kPass);
  EXPECT_NE(verdict_->gpus[0].status, HealthStatus::kFail);  // slow is not proof of a fault
  EXPECT_EQ(verdict_->gpus[1].status, HealthStatus::kPass);

  values_[0] = healthy;
  gpu_read_[0] = ValueStatus::kOk;
  for (int i = 0; i < 120; ++i) Tick();  // past the WARN's expiry window
  EXPECT_EQ(verdict_->gpus[0].status, HealthStatus::kPass);
}

TEST_F(HealthTest, AGpuResetClearsStickyFailures) {
  Add(fid::kEccSbeVolTotal, 10);
  Tick();
  health_->RecordXid(0, 79, now_, false);
  Tick();
  EXPECT_EQ(System(HealthSystem::kDriver), HealthStatus::kFail);
  Set(fid::kEccSbeVolTotal, 0);  // volatile counters only go back on a reset
  Tick();
  EXPECT_EQ(System(HealthSystem::kDriver), HealthStatus::kPass);
}

TEST_F(HealthTest, FailuresReachTheSinkWhenRaisedRepeatedAndCleared) {
  RecordingSink sink;
  Make(DefaultHealthPolicy(), &sink);
  Tick();
  Set(fid::kInforomConfigValid, 0);  // a WARN: not persisted
  health_->RecordXid(0, 79, now_, false);
  Tick();
  Tick();  // the XID's incident is unchanged: nothing new to persist
  health_->RecordXid(0, 79, now_, false);
  Tick();
  health_->RecordXid(0, 48, now_, false);
  Tick();
  EXPECT_THAT(sink.events,
              ::testing::ElementsAre("xid.79 raised x1", "xid.79 raised x2", "xid.48 raised x1"));
  health_->Clear(0, HealthSystem::kDriver, "cleared by uid 0", now_);
  EXPECT_THAT(sink.events, ::testing::IsSupersetOf({"xid.79 cleared: cleared by uid 0",
                                                    "operator clear of GPU-0 driver"}));
  Add(fid::kEccSbeVolTotal, 5);
  Tick();
  health_->RecordXid(0, 79, now_, false);
  Tick();
  sink.events.clear();
  Set(fid::kEccSbeVolTotal, 0);  // a GPU reset
  Tick();
  // Both sticky failures still held (XID 48 counts against memory, which the clear above spared).
  EXPECT_THAT(sink.events, ::testing::ElementsAre("xid.48 cleared: GPU reset seen",
                                                  "xid.79 cleared: GPU reset seen"));
}

TEST_F(HealthTest, ClearRemovesIncidentsAndConditionsComeBack) {
  Tick();
  health_->RecordXid(0, 79, now_, false);
  Set(fid::kInforomConfigValid, 0);
  Tick();
  EXPECT_EQ(health_->Clear(0, HealthSystem::kDriver, "test", now_).size(), 1u);
  EXPECT_EQ(health_->Clear(0, std::nullopt, "test", now_).size(), 1u);
  Tick();
  EXPECT_EQ(System(HealthSystem::kDriver), HealthStatus::kPass);
  EXPECT_EQ(System(HealthSystem::kInforom), HealthStatus::kWarn) << "still corrupt";
}

TEST_F(HealthTest, TransitionsAfterTheBaseline) {
  Tick();
  EXPECT_TRUE(transitions_.empty()) << "the first evaluation is the baseline";
  health_->RecordXid(1, 79, now_, true);
  Tick();
  ASSERT_EQ(transitions_.size(), 1u);
  EXPECT_EQ(transitions_[0].gpu, 1u);
  EXPECT_EQ(transitions_[0].system, HealthSystem::kDriver);
  EXPECT_EQ(transitions_[0].from, HealthStatus::kPass);
  EXPECT_EQ(transitions_[0].to, HealthStatus::kFail);
  EXPECT_TRUE(transitions_[0].injected);
  EXPECT_THAT(transitions_[0].summary, HasSubstr("DCGM_FR_FALLEN_OFF_BUS"));
  transitions_.clear();
  Tick();
  EXPECT_TRUE(transitions_.empty());
}

TEST_F(HealthTest, RestoredFailuresShowFromTheFirstVerdict) {
  Incident incident{.gpu = 1,
                    .uuid = "GPU-1",
                    .system = HealthSystem::kMemory,
                    .status = HealthStatus::kFail,
                    .key = "xid.48",
                    .code = "DCGM_FR_VOLATILE_DBE_DETECTED",
                    .first_seen = kT0 - absl::Hours(3)};
  Make(DefaultHealthPolicy(), nullptr, {.incidents = {incident}});
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory, 1), HealthStatus::kFail);
  EXPECT_EQ(Incidents(HealthSystem::kMemory, 1)[0].first_seen, kT0 - absl::Hours(3));
}

// The incident of a kernel-log XID keeps the log's record, persisted with its count: a restart
// that reads the log again recognises that record and those before it, of that log only, and
// an XID counted from NVML's report learns the log's record of it too.
TEST_F(HealthTest, AnIncidentKeepsTheKernelLogRecordItCounts) {
  RecordingSink sink;
  Make(DefaultHealthPolicy(), &sink);
  Tick();
  const LogPosition record{.source = "/dev/kmsg", .sequence = 20};
  EXPECT_FALSE(health_->CountsXidRecord(0, 79, record));
  health_->RecordXid(0, 79, now_, false, false, "", record);
  Tick();
  EXPECT_EQ(Incidents(HealthSystem::kDriver, 0)[0].log_position, record);
  EXPECT_TRUE(health_->CountsXidRecord(0, 79, record));
  EXPECT_TRUE(health_->CountsXidRecord(0, 79, {.source = "/dev/kmsg", .sequence = 19}));
  EXPECT_FALSE(health_->CountsXidRecord(0, 79, {.source = "/dev/kmsg", .sequence = 21}));
  EXPECT_FALSE(health_->CountsXidRecord(0, 79, {.source = "the journal", .sequence = 20}));
  EXPECT_FALSE(health_->CountsXidRecord(0, 48, record)) << "another XID's incident";
  EXPECT_FALSE(health_->CountsXidRecord(1, 79, record)) << "another GPU's";

  // NVML reported XID 48 first; the log's line for it is the same XID.
  health_->RecordXid(1, 48, now_, false);
  Tick();
  sink.events.clear();
  health_->NoteXidRecord(1, 48, {.source = "/dev/kmsg", .sequence = 30});
  Tick();
  EXPECT_THAT(sink.events, ::testing::ElementsAre("xid.48 raised x1")) << "persisted, not counted";
  EXPECT_TRUE(health_->CountsXidRecord(1, 48, {.source = "/dev/kmsg", .sequence = 30}));

  // After a restart: what the store kept.
  Make(DefaultHealthPolicy(), nullptr, {.incidents = {Incidents(HealthSystem::kDriver, 0)[0]}});
  EXPECT_TRUE(health_->CountsXidRecord(0, 79, record));
}

TEST_F(HealthTest, ADrillsIncidentSaysWhetherActionsMayFollowAndARealOneIsNeverMasked) {
  Tick();
  health_->RecordXid(0, 79, now_, /*injected=*/true, /*actions_allowed=*/false);
  health_->RecordXid(1, 79, now_, /*injected=*/true, /*actions_allowed=*/true);
  Tick();
  ASSERT_EQ(Incidents(HealthSystem::kDriver, 0).size(), 1u);
  EXPECT_TRUE(Incidents(HealthSystem::kDriver, 0)[0].injected);
  EXPECT_FALSE(Incidents(HealthSystem::kDriver, 0)[0].actions_allowed);
  EXPECT_TRUE(Incidents(HealthSystem::kDriver, 1)[0].actions_allowed);
  // The same XID for real: the incident is real from now on, whatever a drill adds later.
  health_->RecordXid(0, 79, now_, /*injected=*/false);
  Tick();
  health_->RecordXid(0, 79, now_, /*injected=*/true, /*actions_allowed=*/false);
  Tick();
  EXPECT_FALSE(Incidents(HealthSystem::kDriver, 0)[0].injected);
  EXPECT_EQ(Incidents(HealthSystem::kDriver, 0)[0].count, 3u);
  // An injected reading: the snapshot says whether its injection allows actions.
  values_[1][fid::kInforomConfigValid] = FieldValue::Int(0);
  values_[1][fid::kInforomConfigValid].injected = true;
  allows_actions_ = {false, true};
  Tick();
  ASSERT_EQ(Incidents(HealthSystem::kInforom, 1).size(), 1u);
  EXPECT_TRUE(Incidents(HealthSystem::kInforom, 1)[0].injected);
  EXPECT_TRUE(Incidents(HealthSystem::kInforom, 1)[0].actions_allowed);
}

TEST_F(HealthTest, EveryIncidentSaysWhatItAsksForMachineReadably) {
  HealthPolicy policy = DefaultHealthPolicy();
  ASSERT_TRUE(
      ApplyHealthConfig(YAML::Load("recommended: {memory.volatile_dbe: reboot}"), "e.yaml", &policy)
          .ok());
  Make(std::move(policy));
  Tick();
  health_->RecordXid(0, 79, now_, false);
  health_->RecordXid(1, 13, now_, false);  // ignored: no incident
  health_->RecordXid(1, 94, now_, false);
  Set(fid::kEccDbeVolTotal, 1);
  Set(fid::kInforomConfigValid, 0);
  Tick();
  EXPECT_EQ(Incidents(HealthSystem::kDriver, 0)[0].recommended, RecommendedAction::kReboot);
  EXPECT_EQ(Incidents(HealthSystem::kMemory, 0)[0].recommended, RecommendedAction::kReboot)
      << "overridden in the config (the rule's own is reset-gpu)";
  EXPECT_EQ(Incidents(HealthSystem::kInforom, 0)[0].recommended, RecommendedAction::kInspect);
  EXPECT_EQ(Incidents(HealthSystem::kMemory, 1)[0].recommended, RecommendedAction::kRestartApp);
  // The driver's own recovery action says which.
  Set(fid::kEccDbeVolTotal, 0);
  Set(fid::kGpuRecoveryAction, 2);  // a node reboot
  Tick();
  bool found = false;
  for (const Incident& incident : Incidents(HealthSystem::kDriver, 0)) {
    if (incident.key != "driver.recovery_action") continue;
    found = true;
    EXPECT_EQ(incident.recommended, RecommendedAction::kReboot);
  }
  EXPECT_TRUE(found);
}

TEST_F(HealthTest, ARestoredNvswitchFailureShowsEvenWithoutAKernelLog) {
  Incident fatal{.node_level = true,
                 .system = HealthSystem::kNvswitch,
                 .status = HealthStatus::kFail,
                 .key = "sxid.20034.00000000:06:00.0",
                 .code = "DCGM_FR_NVSWITCH_FATAL_ERROR",
                 .first_seen = kT0 - absl::Hours(1)};
  Make(DefaultHealthPolicy(), nullptr, {.incidents = {fatal}});
  Tick();  // no nvswitch source is attached
  ASSERT_EQ(verdict_->node_systems.size(), 1u) << "a restored failure must not vanish";
  EXPECT_EQ(verdict_->node_systems[0].status, HealthStatus::kFail);
  EXPECT_THAT(verdict_->node_systems[0].unknown_reason, HasSubstr("reads no kernel log"));
  EXPECT_EQ(verdict_->overall, HealthStatus::kFail);
  health_->ClearNode(std::nullopt, "test", now_);
  Tick();
  EXPECT_TRUE(verdict_->node_systems.empty());
}

TEST_F(HealthTest, AClearStartsTheCountRulesAgain) {
  Tick();
  for (int i = 0; i < 4; ++i) health_->RecordXid(0, 63, now_, false);  // counted: WARN at 4
  Tick();
  ASSERT_EQ(System(HealthSystem::kMemory), HealthStatus::kWarn);
  health_->Clear(0, HealthSystem::kMemory, "test", now_);
  Tick();
  health_->RecordXid(0, 63, now_, false);
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory), HealthStatus::kPass)
      << "one after the clear is one, not five";
}

TEST(HealthPolicyTest, ConfigOverridesXidsAndThresholds) {
  HealthPolicy policy = DefaultHealthPolicy();
  const YAML::Node node = YAML::Load(R"(
window: 2m
power_violation_fraction: 0.5
xid:
  "13": {severity: fail, system: memory, action: replace it}
  "92": {count: 10, window: 24h}
  "43": {severity: fail, meaning: "site policy: reset on sight"}
)");
  ASSERT_TRUE(ApplyHealthConfig(node, "e.yaml", &policy).ok());
  EXPECT_EQ(policy.window, absl::Minutes(2));
  EXPECT_EQ(policy.power_violation_fraction, 0.5);
  EXPECT_EQ(policy.RuleFor(13).severity, XidRule::Severity::kFail);
  EXPECT_EQ(policy.RuleFor(13).system, HealthSystem::kMemory);
  EXPECT_EQ(policy.RuleFor(13).action, "replace it");
  EXPECT_EQ(policy.RuleFor(92).severity, XidRule::Severity::kCount);  // kept
  EXPECT_EQ(policy.RuleFor(92).count, 10u);
  EXPECT_EQ(policy.RuleFor(92).window, absl::Hours(24));
  EXPECT_EQ(policy.RuleFor(43).meaning, "site policy: reset on sight");
  EXPECT_EQ(policy.RuleFor(13).meaning, DefaultHealthPolicy().RuleFor(13).meaning);  // kept

  for (const char* bad : {"xid: {\"0\": {severity: fail}}", "xid: {\"79\": {severity: fatal}}",
                          "xid: {\"79\": {system: gpu}}", "xid: {\"79\": {meaning: \"\"}}",
                          "power_violation_fraction: 2", "window: 1s", "bogus: 1"}) {
    HealthPolicy p = DefaultHealthPolicy();
    EXPECT_FALSE(ApplyHealthConfig(YAML::Load(bad), "e.yaml", &p).ok()) << bad;
  }
}

// A node-level system from a source (the nvswitch source's, nvswitch/; its own tests judge
// SXids): listed once attached; its level findings hold while reported; an occurrence is raised
// once, as an onset, and not again when it happened before the last operator clear; the source's
// unknown reason makes the node UNKNOWN, never PASS.
TEST_F(HealthTest, ANodeLevelSourceJudgesTheNodeWithOccurrencesCountedOnce) {
  RecordingSink sink;
  Make(DefaultHealthPolicy(), &sink);
  Tick();
  EXPECT_TRUE(verdict_->node_systems.empty()) << "no source: no system";
  Make(DefaultHealthPolicy(), &sink);
  health_->AttachSource(HealthSystem::kNvswitch);
  reports_ = {{.system = HealthSystem::kNvswitch}};
  Tick();
  ASSERT_EQ(verdict_->node_systems.size(), 1u);
  EXPECT_EQ(verdict_->node_systems[0].system, HealthSystem::kNvswitch);
  EXPECT_EQ(verdict_->node_systems[0].status, HealthStatus::kPass);

  const absl::Time at = now_;
  SourceFinding fatal{.status = HealthStatus::kFail,
                      .key = "switch.fatal",
                      .code = "DCGM_FR_NVSWITCH_FATAL_ERROR",
                      .message = "switch 1 failed",
                      .recommended = RecommendedAction::kReboot,
                      .expire_after = absl::Hours(1),
                      .occurred = at,
                      .log_position = LogPosition{.source = "kmsg", .sequence = 7}};
  reports_ = {{.system = HealthSystem::kNvswitch, .findings = {fatal}}};
  Tick();
  EXPECT_EQ(verdict_->node_systems[0].status, HealthStatus::kFail);
  EXPECT_EQ(verdict_->overall, HealthStatus::kFail);
  for (const GpuHealth& gpu : verdict_->gpus) EXPECT_EQ(gpu.status, HealthStatus::kPass);
  ASSERT_FALSE(transitions_.empty());
  EXPECT_TRUE(transitions_.back().node_level);
  EXPECT_TRUE(health_->CountsRecord(std::nullopt, "switch.fatal",
                                    LogPosition{.source = "kmsg", .sequence = 6}))
      << "the incident keeps its record: a restart reading it again skips it";
  EXPECT_FALSE(health_->CountsRecord(std::nullopt, "switch.fatal",
                                     LogPosition{.source = "kmsg", .sequence = 8}));
  reports_ = {{.system = HealthSystem::kNvswitch}};
  Tick(absl::Hours(2));
  ASSERT_EQ(verdict_->node_systems[0].incidents.size(), 1u) << "a FAIL is sticky";
  EXPECT_EQ(verdict_->node_systems[0].incidents[0].count, 1u) << "reported once, counted once";
  EXPECT_THAT(sink.events, ::testing::ElementsAre("switch.fatal raised x1"));

  EXPECT_EQ(health_->ClearNode(std::nullopt, "test", now_).size(), 1u);
  EXPECT_EQ(health_->LastClear(std::nullopt, HealthSystem::kNvswitch), now_);
  reports_ = {{.system = HealthSystem::kNvswitch, .findings = {fatal}}};  // replayed
  Tick();
  EXPECT_EQ(verdict_->node_systems[0].status, HealthStatus::kPass)
      << "what happened before the clear is not raised again";

  SourceFinding degraded{.status = HealthStatus::kWarn,
                         .key = "switch.degraded",
                         .code = "VIGIL_FR_TEST",
                         .message = "degraded"};
  reports_ = {{.system = HealthSystem::kNvswitch, .findings = {degraded}}};
  Tick();
  EXPECT_EQ(verdict_->node_systems[0].status, HealthStatus::kWarn);
  reports_ = {{.system = HealthSystem::kNvswitch, .unknown = {"the log cannot be read"}}};
  Tick(absl::Minutes(5));
  EXPECT_EQ(verdict_->node_systems[0].status, HealthStatus::kUnknown);
  EXPECT_EQ(verdict_->node_systems[0].unknown_reason, "the log cannot be read");
  EXPECT_TRUE(verdict_->node_systems[0].incidents.empty()) << "the warning stopped holding";
}

TEST_F(HealthTest, WhatHappenedBeforeAnOperatorsClearIsNotRaisedAgain) {
  Tick();
  const absl::Time xid_time = now_;
  health_->RecordXid(0, 79, xid_time, false);
  Tick();
  ASSERT_EQ(System(HealthSystem::kDriver), HealthStatus::kFail);
  const absl::Time cleared = now_;
  health_->Clear(0, std::nullopt, "test", cleared);
  // The same line again, as a kernel log replayed after its replay state was lost brings it.
  health_->RecordXid(0, 79, xid_time, false);
  Tick();
  EXPECT_EQ(System(HealthSystem::kDriver), HealthStatus::kPass);
  // A new one after the clear counts.
  health_->RecordXid(0, 79, now_, false);
  Tick();
  EXPECT_EQ(System(HealthSystem::kDriver), HealthStatus::kFail);

  // The clears survive a restart (the store hands them back).
  Make(DefaultHealthPolicy(), nullptr,
       {.clears = {{.uuid = "GPU-0", .system = HealthSystem::kDriver, .time = cleared},
                   {.uuid = "", .system = std::nullopt, .time = cleared},
                   {.uuid = "GPU-gone", .system = std::nullopt, .time = cleared}}});
  EXPECT_EQ(health_->LastClear(0, HealthSystem::kDriver), cleared);
  EXPECT_EQ(health_->LastClear(0, HealthSystem::kMemory), absl::InfinitePast());
  EXPECT_EQ(health_->LastClear(std::nullopt, HealthSystem::kNvswitch), cleared);
  now_ = cleared + absl::Seconds(30);
  Tick();
  health_->RecordXid(0, 79, xid_time, false);
  health_->RecordXid(1, 79, xid_time, false);  // GPU 1 was never cleared
  health_->RecordXid(0, 48, xid_time, false);  // memory: the clear was of driver only
  Tick();
  EXPECT_EQ(System(HealthSystem::kDriver, 0), HealthStatus::kPass);
  EXPECT_EQ(System(HealthSystem::kMemory, 0), HealthStatus::kFail);
  EXPECT_EQ(System(HealthSystem::kDriver, 1), HealthStatus::kFail);
}

TEST_F(HealthTest, AnOldWarningReplayedAtStartIsHistoryButAnOldFailureCounts) {
  Tick();
  health_->RecordXid(0, 94, now_ - absl::Hours(2), false);  // WARN, its 1 h window long over
  health_->RecordXid(1, 79, now_ - absl::Hours(2), false);  // FAIL: sticky however old
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory, 0), HealthStatus::kPass);
  EXPECT_EQ(System(HealthSystem::kDriver, 1), HealthStatus::kFail);
  health_->RecordXid(0, 94, now_ - absl::Minutes(20), false);  // within its window
  Tick();
  EXPECT_EQ(System(HealthSystem::kMemory, 0), HealthStatus::kWarn);
}

TEST(HealthPolicyTest, SxidRulesFollowTheDriversWordUnlessConfigured) {
  HealthPolicy policy = DefaultHealthPolicy();
  EXPECT_EQ(policy.SxidRuleFor(20034, true).severity, XidRule::Severity::kFail);
  EXPECT_EQ(policy.SxidRuleFor(20034, false).severity, XidRule::Severity::kWarn);
  const YAML::Node node = YAML::Load(R"(
sxid:
  "20034": {severity: warn}
  "12028": {severity: fail, action: "call the switch vendor"}
  "22013": {severity: count, count: 5, window: 10m}
)");
  ASSERT_TRUE(ApplyHealthConfig(node, "e.yaml", &policy).ok());
  EXPECT_EQ(policy.SxidRuleFor(20034, true).severity, XidRule::Severity::kWarn);
  EXPECT_EQ(policy.SxidRuleFor(20034, true).code, "DCGM_FR_NVSWITCH_NON_FATAL_ERROR");
  EXPECT_EQ(policy.SxidRuleFor(20034, true).system, HealthSystem::kNvswitch);
  EXPECT_EQ(policy.SxidRuleFor(12028, false).severity, XidRule::Severity::kFail);
  EXPECT_EQ(policy.SxidRuleFor(12028, false).code, "DCGM_FR_NVSWITCH_FATAL_ERROR");
  EXPECT_EQ(policy.SxidRuleFor(12028, false).action, "call the switch vendor");
  EXPECT_EQ(policy.SxidRuleFor(22013, false).count, 5u);
  EXPECT_EQ(policy.SxidRuleFor(1, true).severity, XidRule::Severity::kFail) << "not listed";

  for (const char* bad :
       {"sxid: {\"20034\": {action: x}}", "sxid: {\"0\": {severity: warn}}",
        "sxid: {\"100000\": {severity: warn}}", "sxid: {\"20034\": {severity: warn, system: pcie}}",
        "xid: {\"79\": {system: nvswitch}}", "sxid: [1]"}) {
    HealthPolicy p = DefaultHealthPolicy();
    EXPECT_FALSE(ApplyHealthConfig(YAML::Load(bad), "e.yaml", &p).ok()) << bad;
  }
  HealthPolicy p = DefaultHealthPolicy();
  const absl::Status missing =
      ApplyHealthConfig(YAML::Load("sxid: {\"20034\": {action: x}}"), "e.yaml", &p);
  EXPECT_THAT(missing.message(), HasSubstr("health.sxid.20034.severity: required"));
}

TEST(HealthPolicyTest, RecommendedActionsHaveDefaultsAndOverrides) {
  HealthPolicy policy = DefaultHealthPolicy();
  EXPECT_EQ(policy.RuleFor(79).recommended, RecommendedAction::kReboot);
  EXPECT_EQ(policy.RuleFor(48).recommended, RecommendedAction::kResetGpu);
  EXPECT_EQ(policy.RuleFor(13).recommended, RecommendedAction::kRestartApp);
  EXPECT_EQ(policy.RuleFor(63).recommended, RecommendedAction::kNone);
  EXPECT_EQ(policy.RuleFor(555).recommended, RecommendedAction::kInspect) << "unknown";
  EXPECT_EQ(policy.SxidRuleFor(20034, true).recommended, RecommendedAction::kReboot);
  EXPECT_EQ(policy.SxidRuleFor(20034, false).recommended, RecommendedAction::kNone);
  ASSERT_TRUE(ApplyHealthConfig(YAML::Load(R"(
xid: {"79": {recommended: reset-gpu}}
sxid: {"20034": {severity: fail, recommended: inspect}}
recommended: {pcie.replay_rate: none}
)"),
                                "e.yaml", &policy)
                  .ok());
  EXPECT_EQ(policy.RuleFor(79).recommended, RecommendedAction::kResetGpu);
  EXPECT_EQ(policy.SxidRuleFor(20034, false).recommended, RecommendedAction::kInspect);
  EXPECT_EQ(policy.RecommendedFor("pcie.replay_rate", RecommendedAction::kInspect),
            RecommendedAction::kNone);
  EXPECT_EQ(policy.RecommendedFor("memory.volatile_dbe", RecommendedAction::kResetGpu),
            RecommendedAction::kResetGpu);
  for (const char* name : {"none", "restart-app", "reset-gpu", "reboot", "inspect"}) {
    ASSERT_TRUE(ParseRecommendedAction(name).has_value()) << name;
    EXPECT_EQ(RecommendedActionName(*ParseRecommendedAction(name)), name);
  }
  for (const char* bad :
       {"recommended: {bogus: reboot}", "recommended: {memory.volatile_dbe: fix-it}",
        "recommended: {nvswitch.sxid: reboot}", "recommended: [1]",
        "xid: {\"79\": {recommended: x}}"}) {
    HealthPolicy p = DefaultHealthPolicy();
    EXPECT_FALSE(ApplyHealthConfig(YAML::Load(bad), "e.yaml", &p).ok()) << bad;
  }
  HealthPolicy p = DefaultHealthPolicy();
  EXPECT_THAT(
      ApplyHealthConfig(YAML::Load("recommended: {memory.volatile_dbe: fix-it}"), "e.yaml", &p)
          .message(),
      HasSubstr("use none, restart-app, reset-gpu, reboot or inspect"));
}

}  // namespace
}  // namespace vigil
