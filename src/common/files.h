// Whole-file reads with errors that name the file. Thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace vigil {

// NotFound / PermissionDenied / Internal "cannot read PATH: reason".
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace vigil
