// Output helpers shared by the CLI commands: aligned text tables for people, JSON for machines,
// value and time formatting, and the one-line error convention (exit codes per SPEC).
// Thread-safety: none needed; each command runs on the main thread.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "vigil/v1/engine.pb.h"

namespace vigil::cli {

// Exit codes, as SPEC says: 0 ok, 1 the checked thing is unhealthy/failed, 2 usage or connection
// error.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUnhealthy = 1;
inline constexpr int kExitError = 2;

// Prints "vigil COMMAND: MESSAGE" on stderr and returns kExitError.
int Fail(std::string_view command, const absl::Status& status);
int Fail(std::string_view command, std::string_view message);

// A value for a table cell: integers as is, doubles with up to three decimals, "N/A" when not
// supported, "LOST" for a lost GPU, "-" before the first sample; a trailing '*' marks an
// injected value.
std::string FormatValue(const v1::FieldValue& value);
// RFC 3339 UTC with milliseconds; "-" for 0.
std::string FormatTimeUs(int64_t unix_us);
std::string_view StatusName(v1::ValueStatus status);

// The value as JSON: {"gpu","field_id","field","status","value","injected","sample_seq",
// "timestamp_us"}; "value" is null unless status is ok.
nlohmann::json ValueJson(const v1::FieldValue& value);

// A text table with left-aligned columns separated by two spaces.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace vigil::cli
