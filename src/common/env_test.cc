// Tests of WriteFileAtomically over a FaultEnv: a failure at any step leaves the old file as it
// was and no temporary file behind.
#include "common/env.h"

#include <cerrno>

#include "gtest/gtest.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

TEST(WriteFileAtomicallyTest, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "state").string();
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), path, "old\n").ok());
  for (const testing::FaultEnv::Op op :
       {testing::FaultEnv::Op::kAppend, testing::FaultEnv::Op::kSync,
        testing::FaultEnv::Op::kRename}) {
    testing::FaultEnv env;
    env.FailNext(op, op == testing::FaultEnv::Op::kAppend ? ENOSPC : EIO);
    EXPECT_FALSE(WriteFileAtomically(&env, path, "new\n").ok());
    EXPECT_EQ(*Env::Default()->ReadFile(path), "old\n");
    const auto names = Env::Default()->ListDir(dir.path().string());
    ASSERT_TRUE(names.ok());
    EXPECT_EQ(*names, std::vector<std::string>{"state"}) << static_cast<int>(op);
  }
}

}  // namespace
}  // namespace vigil
