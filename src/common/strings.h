// Small string helpers on std::string_view. Debian 12's abseil is built with its own
// absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), which std::string_view does not convert
// to, so Vigil uses these and fmt::format instead of absl's string utilities. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vigil {

std::string_view Trim(std::string_view text);
// Splits on `separator`; keeps empty pieces ("a,,b" -> {"a", "", "b"}; "" -> {""}).
std::vector<std::string_view> Split(std::string_view text, char separator);
std::string ToUpper(std::string_view text);
// ASCII case-insensitive equality (HTTP header names and tokens).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// The whole of `text` as a decimal integer, or nullopt (empty, sign where not allowed, junk,
// overflow).
std::optional<int64_t> ParseInt64(std::string_view text);
std::optional<uint64_t> ParseUint64(std::string_view text);
// `text` for a log line or an error message: printable ASCII as it is, any other byte as \xNN, so
// that the line stays one clean line whatever a file or a request held. With `max_bytes`, at most
// that many bytes of `text`, then "..." where it went on.
std::string Printable(std::string_view text, size_t max_bytes = std::string_view::npos);

}  // namespace vigil
