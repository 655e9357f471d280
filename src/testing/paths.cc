// Implements the test paths from the build's definitions and the environment.
#include "testing/paths.h"

#include <cstdlib>

namespace vigil::testing {

std::string VigilBinary() {
  const char* binary = std::getenv("VIGIL_BINARY");
  return binary != nullptr ? binary : VIGIL_TEST_BINARY;
}

std::string SourceDir() {
  const char* dir = std::getenv("VIGIL_SOURCE_DIR");
  return dir != nullptr ? dir : VIGIL_TEST_SOURCE_DIR;
}

}  // namespace vigil::testing
