// The incident report (`vigil report`): one self-contained HTML page for a GPU's failure — its
// identity, the incidents and their timeline, and charts (inline SVG, no script, nothing fetched
// from the network) of the fields that matter to its failing systems, the moment it turned FAIL
// marked on each — what an operator attaches to an RMA ticket; and the same data as JSON.
// Made from a flight recording (api/recording.h), or from the live engine's history put in that
// shape. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "api/recording.h"
#include "nlohmann/json.hpp"

namespace vigil {

// A chart of the report: the fields it draws (those the data has), and which health systems it
// is evidence for.
struct ReportChart {
  std::string title;
  std::string unit;
  std::vector<FieldId> fields;
  std::vector<std::string> systems;  // "power", "thermal", ... ("" entries: always shown)
};

// The charts for a recording: those of its failing (or warning) systems first, then the ones
// every report has (power, temperatures, clocks); only charts with data.
std::vector<ReportChart> ChartsFor(const Recording& recording);

// The page, complete: one file, nothing to fetch.
std::string RenderReportHtml(const Recording& recording);
// The same data: identity, trigger, incidents, and per chart its series' samples.
nlohmann::json ReportJson(const Recording& recording);

}  // namespace vigil
