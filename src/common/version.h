// The version of this build, set by CMake from project(VERSION). Constant; thread-safe.
#pragma once

#include <string_view>

namespace vigil {

#ifndef VIGIL_VERSION
#error "VIGIL_VERSION must be defined by the build"
#endif
inline constexpr std::string_view kVersion = VIGIL_VERSION;

}  // namespace vigil
