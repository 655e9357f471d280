// The dcgm-exporter release whose output the exporter reproduces (--compat), and what differs
// between the releases Vigil matches. Read from dcgm-exporter's sources (docs/exporter.md,
// "Releases"): between 4.8.2 (tag 4.5.3-4.8.2) and 4.8.3 the rendered output changed in one
// place, commit d5e5f51 (#655), which spells the node label `hostname` instead of `Hostname`.
// Pure functions: thread-safe.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

namespace vigil {

enum class DcgmExporterRelease {
  k4_8_2,  // dcgm-exporter 4.5.3-4.8.2 and every release before it back to 3.x: `Hostname`
  k4_8_3,  // 4.6.0-4.8.3 and later: `hostname`
};

// The default: 4.8.2's output, which Vigil has always written (docs/exporter.md says why).
inline constexpr DcgmExporterRelease kDefaultDcgmExporterRelease = DcgmExporterRelease::k4_8_2;

// "4.8.2" or "4.8.3" (dcgm-exporter's full tags, "4.5.3-4.8.2", too); InvalidArgument with the
// releases to choose from otherwise.
absl::StatusOr<DcgmExporterRelease> ParseDcgmExporterRelease(std::string_view text);

// The spelling of the node label in `release`'s output.
std::string_view HostnameLabelOf(DcgmExporterRelease release);

}  // namespace vigil
