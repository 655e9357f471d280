// Strict reading of YAML documents (engine config, scenarios): every error names the file, the
// line and the key path, and unknown keys are errors rather than silently ignored — a typo in a
// config must not quietly fall back to a default. Pure functions; thread-safe.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "yaml-cpp/yaml.h"

namespace vigil::yaml {

// Parses a whole document. InvalidArgument "SOURCE:LINE: ..." on a syntax error.
absl::StatusOr<YAML::Node> Parse(std::string_view text, std::string_view source);
// Reads and parses a file. NotFound / InvalidArgument with the path on failure.
absl::StatusOr<YAML::Node> Load(const std::string& path);

// Runs `read` (which walks a parsed document), turning a yaml-cpp exception it throws into
// InvalidArgument "SOURCE:LINE: ...". yaml-cpp reports some malformed input only while walking.
template <typename Result, typename Read>
absl::StatusOr<Result> Guard(std::string_view source, Read read) {
  try {
    return read();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        fmt::format("{}:{}: malformed YAML: {}", source, e.mark.line + 1, e.msg));
  }
}

// Reports errors against one document: "SOURCE:LINE: PATH: message".
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  absl::Status Error(const YAML::Node& node, std::string_view path, std::string_view message) const;
  // node must be a map whose keys are all in `allowed`.
  absl::Status ExpectMap(const YAML::Node& node, std::string_view path,
                         std::initializer_list<std::string_view> allowed) const;
  absl::StatusOr<absl::Duration> Duration(const YAML::Node& node, std::string_view path) const;
  absl::StatusOr<int64_t> Int(const YAML::Node& node, std::string_view path) const;
  absl::StatusOr<double> Double(const YAML::Node& node, std::string_view path) const;
  absl::StatusOr<std::string> String(const YAML::Node& node, std::string_view path) const;

 private:
  std::string source_;
};

}  // namespace vigil::yaml
