// Tests of the MIG profiles, `--mig` layouts and their placement on the simulated H100 80GB, and
// of the sim backend's MIG GPUs.
#include "backend/mig.h"

#include "backend/sim_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Profiles(const std::vector<MigInstance>& instances) {
  std::vector<std::string> out;
  for (const MigInstance& instance : instances) {
    out.push_back(instance.profile + "@" + std::to_string(instance.placement_start));
  }
  return out;
}

TEST(MigTest, LayoutsParseAndRefuseWhatIsNotALayout) {
  auto layout = ParseMigLayout("0:1g.10gb,1g.10gb,2g.20gb");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->gpu, 0u);
  EXPECT_THAT(layout->profiles, ElementsAre("1g.10gb", "1g.10gb", "2g.20gb"));
  EXPECT_THAT(ParseMigLayout("1:9g.90gb").status().message(),
              HasSubstr("unknown profile '9g.90gb' (the simulated H100 80GB has 1g.10gb, "
                        "1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb or 7g.80gb)"));
  EXPECT_THAT(ParseMigLayout("1g.10gb").status().message(), HasSubstr("no GPU index"));
  EXPECT_THAT(ParseMigLayout("x:1g.10gb").status().message(), HasSubstr("not an index"));
  EXPECT_THAT(ParseMigLayout("0:").status().message(), HasSubstr("unknown profile ''"));
}

TEST(MigTest, InstancesArePlacedAsTheDriverAcceptsThem) {
  auto mixed = PlaceMigInstances({"1g.10gb", "1g.10gb", "2g.20gb"}, 81559, "GPU-0");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_THAT(Profiles(*mixed), ElementsAre("2g.20gb@0", "1g.10gb@2", "1g.10gb@3"));
  EXPECT_EQ((*mixed)[0].gpu_instance_id, 1u);
  EXPECT_EQ((*mixed)[0].memory_total_mib, 81559u * 2 / 8);
  EXPECT_EQ((*mixed)[0].compute_slices, 2u);
  // In either order: the 4g only fits at 0, so the 3g goes to 4.
  auto halves = PlaceMigInstances({"3g.40gb", "4g.40gb"}, 81559, "GPU-1");
  ASSERT_TRUE(halves.ok()) << halves.status();
  EXPECT_THAT(Profiles(*halves), ElementsAre("4g.40gb@0", "3g.40gb@4"));
  auto sevens = PlaceMigInstances(std::vector<std::string>(7, "1g.10gb"), 81559, "GPU-2");
  ASSERT_TRUE(sevens.ok()) << sevens.status();
  ASSERT_EQ(sevens->size(), 7u);
  EXPECT_EQ((*sevens)[6].placement_start, 6u);
  // UUIDs: MIG-…, distinct, and the same for the same GPU and layout.
  EXPECT_THAT((*sevens)[0].uuid,
              ::testing::MatchesRegex("MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                                      "[0-9a-f]{12}"));
  EXPECT_NE((*sevens)[0].uuid, (*sevens)[1].uuid);
  EXPECT_EQ((*sevens)[3].uuid,
            (*PlaceMigInstances(std::vector<std::string>(7, "1g.10gb"), 81559, "GPU-2"))[3].uuid);
}

TEST(MigTest, ALayoutTheGpuCannotHoldSaysWhy) {
  EXPECT_THAT(
      PlaceMigInstances(std::vector<std::string>(8, "1g.10gb"), 81559, "G").status().message(),
      HasSubstr("8 x 1g.10gb: an H100 80GB holds at most 7"));
  EXPECT_THAT(PlaceMigInstances({"4g.40gb", "4g.40gb"}, 81559, "G").status().message(),
              HasSubstr("at most 1"));
  EXPECT_THAT(PlaceMigInstances({"7g.80gb", "1g.10gb"}, 81559, "G").status().message(),
              HasSubstr("need 8 compute slices; an H100 80GB has 7"));
  EXPECT_THAT(PlaceMigInstances({"3g.40gb", "3g.40gb", "1g.10gb"}, 81559, "G").status().message(),
              HasSubstr("do not fit on one H100 80GB"));
}

TEST(MigTest, TheSimBackendPartitionsTheGpusItIsGiven) {
  auto sim = SimBackend::Create({.gpu_count = 3,
                                 .mig = {{.gpu = 0, .profiles = {"1g.10gb", "2g.20gb"}},
                                         {.gpu = 2, .profiles = {"7g.80gb"}}}});
  ASSERT_TRUE(sim.ok()) << sim.status();
  const auto& gpus = (*sim)->gpus();
  EXPECT_TRUE(gpus[0].mig.mode);
  EXPECT_THAT(Profiles(gpus[0].mig.instances), ElementsAre("2g.20gb@0", "1g.10gb@2"));
  EXPECT_FALSE(gpus[1].mig.mode);
  EXPECT_TRUE(gpus[1].mig.instances.empty());
  EXPECT_EQ(gpus[2].mig.instances.size(), 1u);
  EXPECT_THAT(SimBackend::Create({.gpu_count = 2, .mig = {{.gpu = 2, .profiles = {"1g.10gb"}}}})
                  .status()
                  .message(),
              HasSubstr("there is no GPU 2 (--gpus 2: 0-1)"));
  EXPECT_THAT(SimBackend::Create({.gpu_count = 2,
                                  .mig = {{.gpu = 1, .profiles = {"1g.10gb"}},
                                          {.gpu = 1, .profiles = {"1g.10gb"}}}})
                  .status()
                  .message(),
              HasSubstr("given twice"));
  EXPECT_THAT(
      SimBackend::Create({.gpu_count = 1, .mig = {{.gpu = 0, .profiles = {"4g.40gb", "4g.40gb"}}}})
          .status()
          .message(),
      HasSubstr("--mig for GPU 0: 2 x 4g.40gb"));
}

}  // namespace
}  // namespace vigil
