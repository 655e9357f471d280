// Durations as users write them in flags and config files: "500ms", "30s", "1h30m", "2m".
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vigil {

// A finite, non-negative duration with a unit ("0" is allowed alone). InvalidArgument otherwise,
// with a message that shows the accepted forms.
absl::StatusOr<absl::Duration> ParseDuration(std::string_view text);

}  // namespace vigil
