// Where tests find things: the `vigil` binary under test and the source tree. Set by CMake for
// every test executable (vigil_test), overridable by $VIGIL_BINARY / $VIGIL_SOURCE_DIR.
#pragma once

#include <cstdlib>
#include <string>

namespace vigil::testing {

inline std::string VigilBinary() {
  const char* binary = std::getenv("VIGIL_BINARY");
  return binary != nullptr ? binary : VIGIL_TEST_BINARY;
}

inline std::string SourceDir() {
  const char* dir = std::getenv("VIGIL_SOURCE_DIR");
  return dir != nullptr ? dir : VIGIL_TEST_SOURCE_DIR;
}

}  // namespace vigil::testing
