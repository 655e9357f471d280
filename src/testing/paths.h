// Where tests find things: the `vigil` binary under test and the source tree. CMake sets them
// for the build (compiled into testing/paths.cc alone, so no other object file holds a path of
// this checkout and compiler caches serve every clone); $VIGIL_BINARY / $VIGIL_SOURCE_DIR
// override them. Thread-safe.
#pragma once

#include <string>

namespace vigil::testing {

std::string VigilBinary();
std::string SourceDir();

}  // namespace vigil::testing
