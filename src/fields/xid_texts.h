// The `err_msg` texts dcgm-exporter gives the XID codes on DCGM_FI_DEV_XID_ERRORS, as data: its
// table (dcgm-exporter 4.5.3-4.8.2, internal/pkg/collector/xid_errors.go, codes 0-172), so that a
// series keeps its identity across a migration from dcgm-exporter. Kept apart from the health
// policy's XID meanings and actions, which are Vigil's own words.
// Immutable; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace vigil {

// dcgm-exporter's text for `code`: "No Error" for 0, "Unknown Error" for a code its table does not
// name (below 0 or above 172), as its toMetric() does.
std::string_view DcgmExporterXidText(int64_t code);

}  // namespace vigil
