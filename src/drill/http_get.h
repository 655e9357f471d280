// Plain HTTP(S) GETs of the chain's web links (the exporter, the health check, Prometheus,
// Alertmanager), and the one parse the drill needs of Prometheus' text format. Stateless;
// thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vigil::drill {

// "http://host:port[/prefix]" or https; the error says what is wrong with the URL.
absl::Status CheckHttpUrl(std::string_view flag, const std::string& url);

// GET `base` + `path`: the body of a 200; Unavailable when nothing answers, FailedPrecondition
// with the status and the body's first line for any other answer.
absl::StatusOr<std::string> HttpGet(const std::string& base, const std::string& path,
                                    absl::Duration timeout = absl::Seconds(5));

// One sample of a scrape: `name{labels} value`.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
// The samples of a text-format scrape whose metric name is in `names` (others are skipped
// without being parsed); a line that does not parse is skipped.
std::vector<Sample> ParseSamples(std::string_view text, const std::vector<std::string>& names);

}  // namespace vigil::drill
