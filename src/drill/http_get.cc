// Implements the GETs and the scrape parse.
#include "drill/http_get.h"

#include <algorithm>
#include <cstdlib>

#include "fmt/format.h"
#include "httplib.h"

namespace vigil::drill {
namespace {

// Splits "http://host:port/prefix" into the origin and the path prefix ("" or "/prefix").
bool SplitUrl(const std::string& url, std::string* origin, std::string* prefix) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return false;
  const std::string_view kind = std::string_view(url).substr(0, scheme);
  if (kind != "http" && kind != "https") return false;
  const size_t path = url.find('/', scheme + 3);
  *origin = url.substr(0, path);
  *prefix = path == std::string::npos ? "" : url.substr(path);
  while (!prefix->empty() && prefix->back() == '/') prefix->pop_back();
  return origin->size() > scheme + 3;
}

}  // namespace

absl::Status CheckHttpUrl(std::string_view flag, const std::string& url) {
  std::string origin, prefix;
  if (!SplitUrl(url, &origin, &prefix)) {
    return absl::InvalidArgumentError(
        fmt::format("{} '{}': expected http://HOST:PORT or https://HOST:PORT", flag, url));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HttpGet(const std::string& base, const std::string& path,
                                    absl::Duration timeout) {
  std::string origin, prefix;
  if (!SplitUrl(base, &origin, &prefix)) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not an http(s) URL", base));
  }
  httplib::Client client(origin);
  const auto micros = absl::ToInt64Microseconds(timeout);
  client.set_connection_timeout(micros / 1'000'000, micros % 1'000'000);
  client.set_read_timeout(micros / 1'000'000, micros % 1'000'000);
  const std::string url = origin + prefix + path;
  auto result = client.Get(prefix + path);
  if (!result) {
    return absl::UnavailableError(
        fmt::format("GET {}: {}", url, httplib::to_string(result.error())));
  }
  if (result->status != 200) {
    const std::string& body = result->body;
    return absl::FailedPreconditionError(
        fmt::format("GET {}: HTTP {}: {}", url, result->status,
                    body.substr(0, std::min(body.find('\n'), 200ul))));
  }
  return std::move(result->body);
}

std::vector<Sample> ParseSamples(std::string_view text, const std::vector<std::string>& names) {
  std::vector<Sample> samples;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, name_end);
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    Sample sample{.name = std::string(name)};
    size_t at = name_end;
    if (line[at] == '{') {
      ++at;
      bool ok = true;
      while (at < line.size() && line[at] != '}') {
        const size_t equals = line.find("=\"", at);
        if (equals == std::string_view::npos) {
          ok = false;
          break;
        }
        std::string key(line.substr(at, equals - at));
        std::string value;
        size_t i = equals + 2;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        if (i >= line.size()) {
          ok = false;
          break;
        }
        sample.labels[std::move(key)] = std::move(value);
        at = i + 1;
        if (at < line.size() && line[at] == ',') ++at;
      }
      if (!ok || at >= line.size()) continue;
      ++at;  // '}'
    }
    while (at < line.size() && line[at] == ' ') ++at;
    const std::string number(line.substr(at, line.find(' ', at) - at));
    char* parsed_end = nullptr;
    sample.value = std::strtod(number.c_str(), &parsed_end);
    if (number.empty() || parsed_end != number.c_str() + number.size()) continue;
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace vigil::drill
