// Implements the object helpers.
#include "kube/object.h"

#include <algorithm>
#include <cctype>

#include "common/status.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil::kube {

using Json = nlohmann::json;

const Json& At(const Json& object, std::string_view key) {
  static const Json null;
  if (!object.is_object()) return null;
  auto it = object.find(key);
  return it == object.end() ? null : *it;
}

std::string StringAt(const Json& object, std::string_view key) {
  const Json& value = At(object, key);
  return value.is_string() ? value.get<std::string>() : "";
}

std::string Time(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

bool IsDnsName(std::string_view text, bool dots, size_t max) {
  if (text.empty() || text.size() > max ||
      !std::isalnum(static_cast<unsigned char>(text.front())) ||
      !std::isalnum(static_cast<unsigned char>(text.back()))) {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [&](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '-' || (dots && c == '.');
  });
}

std::string QueryEscape(std::string_view text) {
  std::string escaped;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      escaped += static_cast<char>(c);
    } else {
      escaped += fmt::format("%{:02X}", c);
    }
  }
  return escaped;
}

std::string AnswerText(const absl::StatusOr<KubeResponse>& response) {
  return response.ok() ? ApiMessage(response->body) : std::string(MessageOf(response.status()));
}

std::string ApiMessage(const std::string& body) {
  const Json status = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  const std::string message = StringAt(status, "message");
  return message.empty() ? body.substr(0, 200) : message;
}

bool IsLaterResourceVersion(std::string_view candidate, std::string_view known) {
  const std::optional<uint64_t> a = ParseUint64(candidate), b = ParseUint64(known);
  if (a.has_value() && b.has_value()) return *a > *b;
  return candidate != known;
}

}  // namespace vigil::kube
