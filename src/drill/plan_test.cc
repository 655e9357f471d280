// Tests of the drill plan's names and parsing.
#include "drill/plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::drill {
namespace {

using ::testing::HasSubstr;

TEST(DrillPlanTest, EveryStageHasANameThatParsesBack) {
  for (Stage stage : kAllStages) EXPECT_EQ(ParseStage(StageName(stage)), stage);
  EXPECT_FALSE(ParseStage("exporters").has_value());
  EXPECT_EQ(StageChoices(),
            "engine, exporter, healthcheck, node-condition, taint, device-quarantine, alert, "
            "alertmanager, "
            "quarantine, drain or recovery");
}

TEST(DrillPlanTest, StageDeadlinesParseOrSayWhatIsWrong) {
  auto alert = ParseStageDeadline("alert=5m");
  ASSERT_TRUE(alert.ok()) << alert.status();
  EXPECT_EQ(alert->first, Stage::kAlert);
  EXPECT_EQ(alert->second, absl::Minutes(5));
  EXPECT_THAT(ParseStageDeadline("alert").status().message(), HasSubstr("expected STAGE=DURATION"));
  EXPECT_THAT(ParseStageDeadline("alerts=5m").status().message(),
              HasSubstr("unknown stage 'alerts': use engine,"));
  EXPECT_FALSE(ParseStageDeadline("alert=soon").ok());
  EXPECT_THAT(ParseStageDeadline("alert=2h").status().message(), HasSubstr("between 1s and 1h"));
  EXPECT_FALSE(ParseStageDeadline("alert=0s").ok());
}

TEST(DrillPlanTest, TheAlertStagesWaitForTheShippedRules) {
  EXPECT_EQ(DefaultDeadline(Stage::kExporter, absl::Minutes(2)), absl::Minutes(2));
  EXPECT_EQ(DefaultDeadline(Stage::kAlert, absl::Minutes(2)), absl::Minutes(3));
  EXPECT_EQ(DefaultDeadline(Stage::kAlertmanager, absl::Minutes(2)), absl::Seconds(210));
}

TEST(DrillPlanTest, AFaultSaysWhatItIs) {
  Fault xid{.kind = Fault::Kind::kXid, .gpu = 2, .xid = 79};
  EXPECT_EQ(xid.Describe(), "XID 79 on GPU 2");
  Fault field{.kind = Fault::Kind::kField, .gpu = 1, .field = FindField(150), .value = 95};
  EXPECT_EQ(field.Describe(), "DCGM_FI_DEV_GPU_TEMP=95 on GPU 1");
}

}  // namespace
}  // namespace vigil::drill
