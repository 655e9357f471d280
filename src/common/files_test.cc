// Tests of ReadFile: a whole file of any size, and each failure as the status a caller tells
// apart (missing, not permitted, not readable), naming the path.
#include "common/files.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

TEST(FilesTest, AFileIsReadWholeWhateverItsSize) {
  testing::TempDir dir;
  std::string large;
  for (int i = 0; i < 3000; ++i) large += std::to_string(i) + "\n";  // several reads' worth
  ASSERT_GT(large.size(), 3 * 4096u);
  std::ofstream(dir.File("large"), std::ios::binary) << large;
  std::ofstream(dir.File("empty"));
  std::ofstream(dir.File("state")) << "4: ACTIVE\n";
  EXPECT_EQ(*ReadFile(dir.File("large")), large);
  EXPECT_EQ(*ReadFile(dir.File("empty")), "");
  EXPECT_EQ(*ReadFile(dir.File("state")), "4: ACTIVE\n");
}

TEST(FilesTest, EachFailureIsItsOwnStatusNamingThePath) {
  testing::TempDir dir;
  const absl::StatusOr<std::string> missing = ReadFile(dir.File("missing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot read " + dir.File("missing")));
  // A directory opens but cannot be read (EISDIR).
  const absl::StatusOr<std::string> directory = ReadFile(dir.path().string());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(directory.status().message(), HasSubstr("Is a directory"));
}

}  // namespace
}  // namespace vigil
