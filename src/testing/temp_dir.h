// A temporary directory for one test, removed with everything in it when the object dies.
// Not thread-safe; owned by one test.
#pragma once

#include <filesystem>
#include <string>

namespace vigil::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path()/name as a string.
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace vigil::testing
