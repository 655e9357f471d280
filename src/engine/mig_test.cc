// Tests the engine's MIG entities: per-instance values in the snapshot, their history, and a
// layout change while the engine runs (the sim's SetMig, as an operator's nvidia-smi mig would).
#include <algorithm>

#include "engine/test_fixture.h"
#include "gmock/gmock.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class MigEngineTest : public SimEngineTest {
 protected:
  void SetUp() override {
    StartEngine(0, {.gpu_count = 2,
                    .seed = 3,
                    .mig = {{.gpu = 0, .profiles = {"1g.10gb", "1g.10gb", "2g.20gb"}}}});
  }
  // The k (among the per-instance fields) of field `id`.
  size_t SlotOf(const Snapshot& snapshot, FieldId id) {
    const std::vector<size_t>& fields = *snapshot.instance_fields;
    for (size_t k = 0; k < fields.size(); ++k) {
      if (snapshot.layout->field(fields[k]).id == id) return k;
    }
    ADD_FAILURE() << "field " << id << " is not sampled per instance";
    return 0;
  }
  int64_t InstanceInt(size_t row, FieldId id) {
    const auto latest = engine_->Latest();
    const LatestValue& value = latest->instance_at(row, SlotOf(*latest, id));
    EXPECT_EQ(value.value.status, ValueStatus::kOk) << "row " << row << " field " << id;
    return value.value.status == ValueStatus::kOk ? std::get<int64_t>(value.value.value) : -1;
  }
};

TEST_F(MigEngineTest, EachGpuInstanceHasValuesOfItsOwnForThePerInstanceFields) {
  Tick(3);
  const auto latest = engine_->Latest();
  ASSERT_EQ(latest->mig->rows.size(), 3u);  // GPU 1 is whole: no rows
  EXPECT_EQ(latest->mig->first_row[1], 3u);
  EXPECT_THAT(*latest->instance_fields, ::testing::SizeIs(::testing::Ge(8u)));
  for (size_t row = 0; row < 3; ++row) {
    const MigInstance& instance = latest->mig->instance(row);
    EXPECT_EQ(InstanceInt(row, fid::kFbTotal), static_cast<int64_t>(instance.memory_total_mib));
    EXPECT_EQ(InstanceInt(row, fid::kFbUsed) + InstanceInt(row, fid::kFbFree) +
                  InstanceInt(row, fid::kFbReserved),
              static_cast<int64_t>(instance.memory_total_mib));
  }
  // Placed as the driver does: the 2g.20gb at 0, with twice the memory of a 1g.10gb.
  EXPECT_EQ(latest->mig->instance(0).profile, "2g.20gb");
  EXPECT_NEAR(InstanceInt(0, fid::kFbTotal), 2 * InstanceInt(1, fid::kFbTotal), 1);
  // Temperature belongs to the GPU: not an instance field.
  EXPECT_FALSE(SampledPerMigInstance(fid::kGpuTemp));
  // The instances' activity differs (each runs its own share of the work).
  const size_t gr = SlotOf(*latest, fid::kProfGrEngineActive);
  std::vector<double> activity;
  for (size_t row = 0; row < 3; ++row) {
    activity.push_back(std::get<double>(latest->instance_at(row, gr).value.value));
  }
  EXPECT_FALSE(activity[0] == activity[1] && activity[1] == activity[2]);
}

TEST_F(MigEngineTest, InstanceHistoryIsServedWithItsGpuInstanceId) {
  Tick(4);
  auto history = engine_->History(
      {.gpus = {0}, .fields = {fid::kFbUsed, fid::kGpuTemp}, .include_mig_instances = true});
  ASSERT_TRUE(history.ok()) << history.status();
  // GPU 0's two series, then FB_USED of each of its three instances (temperature is per GPU).
  ASSERT_EQ(history->size(), 5u);
  EXPECT_FALSE((*history)[0].gpu_instance.has_value());
  std::vector<uint32_t> instances;
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_EQ((*history)[i].field, fid::kFbUsed);
    instances.push_back((*history)[i].gpu_instance.value_or(0));
    EXPECT_EQ((*history)[i].samples.size(), 4u);
  }
  EXPECT_THAT(instances, ElementsAre(1, 2, 3));
  // Without asking, no instance series.
  auto plain = engine_->History({.gpus = {0}, .fields = {fid::kFbUsed}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->size(), 1u);
}

// The driver's MIG-change event has the layout read at the next tick; from a driver without one,
// the periodic poll finds it.
TEST_F(MigEngineTest, AReconfigurationTheDriverReportsIsReadAtTheNextTick) {
  Tick(2);
  const uint64_t generation = engine_->Mig()->generation;
  ASSERT_TRUE(sim_->SetMig(1, true, {"7g.80gb"}).ok());
  Tick();
  EXPECT_EQ(engine_->Mig()->generation, generation + 1);
  EXPECT_TRUE(engine_->Mig()->gpus[1].mode);
}

TEST_F(MigEngineTest, AReconfigurationNoEventReportsIsFoundByThePoll) {
  StartEngine(0, {.gpu_count = 2, .seed = 3, .mig_change_events = false});
  Tick(2);
  const uint64_t generation = engine_->Mig()->generation;
  ASSERT_TRUE(sim_->SetMig(1, true, {"7g.80gb"}).ok());
  Tick();
  EXPECT_EQ(engine_->Mig()->generation, generation) << "not before the poll";
  Tick(static_cast<int>(absl::ToInt64Seconds(kMigPollInterval)));
  EXPECT_EQ(engine_->Mig()->generation, generation + 1);
}

TEST_F(MigEngineTest, ALayoutChangeWhileRunningIsPickedUpAndTheOldInstancesEnd) {
  Tick(2);
  const uint64_t generation = engine_->Mig()->generation;
  const std::string kept_uuid = engine_->Mig()->gpus[0].instances[0].uuid;
  // The operator destroys GPU 0's instances and creates a 3g.40gb and a 4g.40gb, and puts GPU 1
  // in MIG mode with seven 1g.10gb.
  ASSERT_TRUE(sim_->SetMig(0, true, {"3g.40gb", "4g.40gb"}).ok());
  ASSERT_TRUE(sim_->SetMig(1, true, std::vector<std::string>(7, "1g.10gb")).ok());
  Tick(static_cast<int>(absl::ToInt64Seconds(kMigPollInterval)));
  const auto mig = engine_->Mig();
  EXPECT_EQ(mig->generation, generation + 1);
  ASSERT_EQ(mig->rows.size(), 9u);
  EXPECT_EQ(mig->instance(0).profile, "4g.40gb");
  EXPECT_EQ(mig->instance(1).profile, "3g.40gb");
  EXPECT_NE(mig->instance(0).uuid, kept_uuid);
  EXPECT_TRUE(mig->gpus[1].mode);
  const auto changes = events_->Messages(EventKind::kMigLayoutChanged);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_THAT(changes[0], HasSubstr("GPU 0"));
  EXPECT_THAT(changes[0], HasSubstr("MIG on: 2g.20gb (GPU instance 1), 1g.10gb (GPU instance 2), "
                                    "1g.10gb (GPU instance 3) -> MIG on: 4g.40gb (GPU instance "
                                    "1), 3g.40gb (GPU instance 2)"));
  // The new instances are sampled from the tick that saw them; the old ones have no series.
  EXPECT_EQ(InstanceInt(0, fid::kFbTotal),
            static_cast<int64_t>(engine_->Mig()->instance(0).memory_total_mib));
  auto history =
      engine_->History({.gpus = {0}, .fields = {fid::kFbTotal}, .include_mig_instances = true});
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 3u);
  EXPECT_EQ((*history)[1].gpu_instance, 1u);
  EXPECT_LE((*history)[1].samples.size(), 2u) << "a new instance's history starts with it";
  // MIG off again: no rows.
  ASSERT_TRUE(sim_->SetMig(0, false, {}).ok());
  ASSERT_TRUE(sim_->SetMig(1, false, {}).ok());
  Tick(static_cast<int>(absl::ToInt64Seconds(kMigPollInterval)));
  EXPECT_TRUE(engine_->Mig()->rows.empty());
  EXPECT_TRUE(engine_->Latest()->instance_values.empty());
}

TEST_F(MigEngineTest, AnXidNamesTheInstanceOfTheCurrentLayout) {
  Tick();
  ASSERT_TRUE(sim_->SetMig(1, true, {"7g.80gb"}).ok());
  Tick(static_cast<int>(absl::ToInt64Seconds(kMigPollInterval)));
  ASSERT_TRUE(engine_->InjectXid({.gpu = 1, .xid = 94, .gpu_instance = 1}, kTestRoot).ok());
  EXPECT_THAT(events_->Messages(EventKind::kXid).back(),
              HasSubstr("XID 94 in GPU instance 1 (7g.80gb, MIG-"));
}

TEST_F(MigEngineTest, ALostGpuMarksItsInstancesLostAndKeepsItsLayout) {
  Tick();
  sim_->SetGpuLost(0, true);
  Tick(static_cast<int>(absl::ToInt64Seconds(kMigPollInterval)));
  const auto latest = engine_->Latest();
  EXPECT_EQ(latest->mig->rows.size(), 3u);
  EXPECT_EQ(latest->instance_at(0, SlotOf(*latest, fid::kFbUsed)).value.status,
            ValueStatus::kGpuLost);
}

TEST(SimMigTest, ALayoutTheGpuCannotHoldIsRefusedAndChangesNothing) {
  auto sim = SimBackend::Create({.gpu_count = 1});
  ASSERT_TRUE(sim.ok());
  EXPECT_EQ((*sim)->SetMig(0, true, {"4g.40gb", "4g.40gb"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*sim)->ReadMig(0)->mode);
  EXPECT_EQ((*sim)->SetMig(0, false, {"1g.10gb"}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vigil
