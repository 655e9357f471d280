// Implements the web config in force: reloading, TLS contexts and basic auth.
#include "webconfig/guard.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include "common/status.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil::webconfig {
namespace {

// "user:password" from an Authorization header's "Basic BASE64"; nullopt when it is not one.
std::optional<std::pair<std::string, std::string>> BasicCredentials(std::string_view header) {
  if (!header.starts_with("Basic ")) return std::nullopt;
  std::string_view encoded = header.substr(6);
  while (!encoded.empty() && encoded.front() == ' ') encoded.remove_prefix(1);
  if (encoded.empty() || encoded.size() % 4 != 0 || encoded.size() > 4096) return std::nullopt;
  std::string decoded(encoded.size() / 4 * 3, '\0');
  const int length = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                     reinterpret_cast<const unsigned char*>(encoded.data()),
                                     static_cast<int>(encoded.size()));
  if (length < 0) return std::nullopt;
  size_t size = static_cast<size_t>(length);
  for (size_t i = encoded.size(); i > 0 && encoded[i - 1] == '='; --i) --size;  // the padding
  decoded.resize(size);
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return std::nullopt;
  return std::make_pair(decoded.substr(0, colon), decoded.substr(colon + 1));
}

std::string Digest(const std::string& text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

}  // namespace

absl::StatusOr<std::unique_ptr<WebConfigGuard>> WebConfigGuard::Load(const std::string& path,
                                                                     Clock* clock) {
  std::unique_ptr<WebConfigGuard> guard(new WebConfigGuard(path, clock));
  auto config = LoadWebConfig(path, clock->Now());
  if (!config.ok()) return config.status();
  if (absl::Status applied = guard->Apply(*std::move(config)); !applied.ok()) return applied;
  guard->next_check_ = clock->Now() + absl::Seconds(1);
  return guard;
}

absl::Status WebConfigGuard::Apply(WebConfig config) {
  std::shared_ptr<SSL_CTX> context;
  if (config.tls.has_value()) {
    auto made = MakeServerContext(*config.tls, path_);
    if (!made.ok()) return made.status();
    context = *std::move(made);
  }
  std::string headers;
  for (const auto& [name, value] : config.headers)
    headers += fmt::format("{}: {}\r\n", name, value);
  config_ = std::move(config);
  tls_context_ = std::move(context);
  extra_headers_ = std::move(headers);
  accepted_.clear();
  stamps_ = StampFiles();
  return absl::OkStatus();
}

std::map<std::string, WebConfigGuard::Stamp> WebConfigGuard::StampFiles() const {
  std::map<std::string, Stamp> stamps;
  std::vector<std::string> files = {path_};
  if (config_.tls.has_value()) {
    files.insert(files.end(), config_.tls->files.begin(), config_.tls->files.end());
  }
  for (const std::string& file : files) {
    struct stat info {};
    Stamp& stamp = stamps[file];
    if (stat(file.c_str(), &info) == 0) {
      stamp.mtime_ns =
          static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
      stamp.size = static_cast<int64_t>(info.st_size);
    }
  }
  return stamps;
}

void WebConfigGuard::ReloadIfChanged() {
  const absl::Time now = clock_->Now();
  if (now < next_check_) return;
  next_check_ = now + absl::Seconds(1);
  const std::map<std::string, Stamp> stamps = StampFiles();
  if (stamps == stamps_) return;
  stamps_ = stamps;  // a config that does not load is said once, until the files change again
  auto config = LoadWebConfig(path_, now);
  absl::Status applied = config.ok() ? Apply(*std::move(config)) : config.status();
  if (!applied.ok()) {
    spdlog::warn("web config {} changed but does not load, so the previous one stays: {}", path_,
                 MessageOf(applied));
    return;
  }
  spdlog::info("web config {} reloaded: {}", path_, Describe());
}

std::shared_ptr<SSL_CTX> WebConfigGuard::TlsContext() {
  ReloadIfChanged();
  return tls_context_;
}

std::optional<HttpResponse> WebConfigGuard::Check(const HttpRequest& request) {
  if (config_.basic_auth_users.empty() || request.path == "/healthz") return std::nullopt;
  const HttpResponse unauthorized{.status = 401,
                                  .extra_headers = "WWW-Authenticate: Basic realm=\"vigil\"\r\n",
                                  .body = "Unauthorized\n"};
  const auto credentials = BasicCredentials(request.authorization);
  if (!credentials) return unauthorized;
  const auto user = config_.basic_auth_users.find(credentials->first);
  if (user == config_.basic_auth_users.end()) return unauthorized;
  const std::string digest =
      Digest(credentials->first + '\0' + credentials->second + '\0' + user->second);
  if (accepted_.contains(digest)) return std::nullopt;
  if (!BcryptMatches(credentials->second, user->second)) return unauthorized;
  accepted_.insert(digest);
  return std::nullopt;
}

std::string WebConfigGuard::ExtraHeaders() { return extra_headers_; }

std::string WebConfigGuard::Describe() const {
  std::vector<std::string> parts;
  if (config_.tls.has_value()) {
    const bool required = config_.tls->client_auth == ClientAuth::kRequireAndVerifyClientCert ||
                          config_.tls->client_auth == ClientAuth::kRequireAnyClientCert;
    parts.push_back(required ? "TLS (client certificates required)" : "TLS");
  } else {
    parts.push_back("plain HTTP");
  }
  if (!config_.basic_auth_users.empty()) {
    parts.push_back(
        fmt::format("basic auth ({} user(s); /healthz open)", config_.basic_auth_users.size()));
  }
  if (!config_.headers.empty())
    parts.push_back(fmt::format("{} header(s)", config_.headers.size()));
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ", ") + part;
  return text;
}

}  // namespace vigil::webconfig
