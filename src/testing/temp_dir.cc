// Implements TempDir with mkdtemp under $TMPDIR (default /tmp). Unix socket paths must stay
// under 108 bytes, so the name is kept short.
#include "testing/temp_dir.h"

#include <cstdlib>
#include <system_error>

#include "common/check.h"

namespace vigil::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/vt.XXXXXX";
  VIGIL_CHECK(mkdtemp(pattern.data()) != nullptr);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace vigil::testing
