// Implements duration parsing over absl::ParseDuration, which takes Go-style durations.
#include "common/duration.h"

#include "fmt/format.h"

namespace vigil {

absl::StatusOr<absl::Duration> ParseDuration(std::string_view text) {
  absl::Duration duration;
  const std::string copy(text);
  if (copy.empty() || !absl::ParseDuration(copy, &duration) || duration < absl::ZeroDuration() ||
      duration == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(fmt::format(
        "'{}' is not a duration: write a non-negative number with a unit, e.g. 500ms, 30s, 5m, 1h",
        text));
  }
  return duration;
}

}  // namespace vigil
