// Implements the release table of compat.h.
#include "exporter/compat.h"

#include "common/strings.h"
#include "fmt/format.h"

namespace vigil {

absl::StatusOr<DcgmExporterRelease> ParseDcgmExporterRelease(std::string_view text) {
  // dcgm-exporter's tags name the DCGM release first: "4.5.3-4.8.2" is exporter 4.8.2.
  std::string_view release = text;
  if (const size_t dash = release.rfind('-'); dash != std::string_view::npos) {
    release = release.substr(dash + 1);
  }
  if (release == "4.8.2") return DcgmExporterRelease::k4_8_2;
  if (release == "4.8.3") return DcgmExporterRelease::k4_8_3;
  return absl::InvalidArgumentError(
      fmt::format("--compat {}: not a dcgm-exporter release Vigil matches: use 4.8.2 (the "
                  "`Hostname` label, every release up to 4.8.2) or 4.8.3 (`hostname`, as the "
                  "releases after it spell it)",
                  Printable(text, 40)));
}

std::string_view HostnameLabelOf(DcgmExporterRelease release) {
  return release == DcgmExporterRelease::k4_8_3 ? "hostname" : "Hostname";
}

}  // namespace vigil
