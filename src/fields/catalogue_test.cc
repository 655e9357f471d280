// Tests for the field catalogue (table invariants and name/ID resolution) and the health
// systems table.
#include "fields/catalogue.h"

#include <set>

#include "fields/health_systems.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CatalogueTest, IdsAreSortedUniqueAndNamesUnique) {
  std::set<std::string_view> names;
  FieldId previous = 0;
  for (const FieldInfo& field : AllFields()) {
    EXPECT_GT(field.id, previous) << field.name;
    previous = field.id;
    for (std::string_view name : {field.name, field.name_v46, field.legacy_name}) {
      if (name.empty()) continue;
      EXPECT_TRUE(name.starts_with("DCGM_FI_")) << name;
      EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    }
    EXPECT_FALSE(field.help.empty()) << field.name;
    EXPECT_FALSE(field.short_name.empty()) << field.name;
    EXPECT_GT(field.default_interval, absl::ZeroDuration()) << field.name;
    if (field.cumulative) {
      EXPECT_NE(field.type, FieldType::kString) << field.name;
    }
  }
}

TEST(CatalogueTest, CoversDcgmExporterDefaultsAndHealthInputs) {
  // dcgm-exporter's default counters, and every field DCGM's health watches read.
  const FieldId required[] = {1,    100,  101, 140, 150, 155, 156, 202, 203,  204,  206,  207,
                              230,  251,  252, 253, 449, 526, 393, 394, 395,  1001, 1004, 1005,
                              1009, 1010, 84,  112, 237, 238, 240, 241, 310,  311,  312,  313,
                              390,  391,  392, 396, 409, 419, 429, 439, 1507, 1523};
  for (FieldId id : required) EXPECT_NE(FindField(id), nullptr) << id;
}

TEST(CatalogueTest, WellKnownFacts) {
  const FieldInfo* temp = FindField(150);
  ASSERT_NE(temp, nullptr);
  EXPECT_EQ(temp->name, "DCGM_FI_DEV_GPU_TEMP");
  EXPECT_EQ(temp->type, FieldType::kInt64);
  EXPECT_EQ(FindField(155)->type, FieldType::kDouble);
  EXPECT_EQ(FindField(54)->type, FieldType::kString);
  EXPECT_TRUE(FindField(156)->cumulative);
  EXPECT_FALSE(FindField(150)->cumulative);
  EXPECT_TRUE(FindField(230)->from_events);
  EXPECT_EQ(FindField(99999), nullptr);
}

TEST(CatalogueTest, ResolvesIdsNamesAliasesCaseInsensitively) {
  EXPECT_EQ((*ResolveField("150"))->id, 150u);
  EXPECT_EQ((*ResolveField("DCGM_FI_DEV_GPU_TEMP"))->id, 150u);
  EXPECT_EQ((*ResolveField("dcgm_fi_dev_gpu_temp"))->id, 150u);
  EXPECT_EQ((*ResolveField(" DCGM_FI_DEV_GPU_TEMP_CELSIUS "))->id, 150u);
  EXPECT_EQ((*ResolveField("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"))->id, 112u);
  EXPECT_EQ((*ResolveField("DCGM_FI_DEV_BOARD_POWER_WATTS"))->id, 155u);
}

TEST(CatalogueTest, RejectsUnknownWithActionableMessage) {
  EXPECT_THAT(ResolveField("DCGM_FI_DEV_GPU_TMP").status().message(),
              HasSubstr("unknown field 'DCGM_FI_DEV_GPU_TMP'"));
  EXPECT_THAT(ResolveField("99999").status().message(), HasSubstr("unknown field ID 99999"));
  EXPECT_THAT(ResolveField("15x").status().message(), HasSubstr("not a field ID"));
  EXPECT_FALSE(ResolveField("").ok());
  EXPECT_FALSE(ResolveField("99999999999999999999").ok());
}

TEST(CatalogueTest, ResolvesListsKeepingFirstOccurrence) {
  EXPECT_THAT(*ResolveFieldList("DCGM_FI_DEV_GPU_TEMP,155,150"), ElementsAre(150u, 155u));
  EXPECT_FALSE(ResolveFieldList("150,,155").ok());
  EXPECT_FALSE(ResolveFieldList("").ok());
  EXPECT_FALSE(ResolveFieldList("150,bogus").ok());
}

TEST(HealthSystemsTest, OneTableServesNamesWatchesAndChoices) {
  for (const HealthSystemInfo& info : kHealthSystems) {
    EXPECT_EQ(HealthSystemName(info.system), info.name);
    EXPECT_EQ(ParseHealthSystem(info.name), info.system);
    EXPECT_EQ(HealthSystemWatchName(info.name), info.dcgm_watch);
  }
  EXPECT_EQ(HealthSystemWatchName("memory"), "MEM");
  EXPECT_EQ(ParseHealthSystem("gpu"), std::nullopt);
  EXPECT_EQ(HealthSystemChoices(),
            "pcie, memory, inforom, thermal, power, nvlink, driver or network");
}

}  // namespace
}  // namespace vigil
