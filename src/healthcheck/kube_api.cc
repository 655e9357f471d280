// Implements the in-cluster API client over cpp-httplib's TLS client (OpenSSL), verifying the
// API server against the service account's CA.
#include "healthcheck/kube_api.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "common/files.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/version.h"
#include "fmt/format.h"
#include "httplib.h"

namespace vigil {

absl::StatusOr<std::unique_ptr<InClusterKube>> InClusterKube::Create(
    const std::string& service_account_dir, Clock* clock) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') {
    return absl::FailedPreconditionError(
        "--kubernetes: KUBERNETES_SERVICE_HOST is not set: this is not running in a Kubernetes "
        "pod (drop --kubernetes outside a cluster)");
  }
  std::unique_ptr<InClusterKube> kube(new InClusterKube(clock));
  kube->host_ = host;
  if (port != nullptr && *port != '\0') {
    const auto parsed = ParseUint64(port);
    if (!parsed || *parsed == 0 || *parsed > 65535) {
      return absl::FailedPreconditionError(
          fmt::format("--kubernetes: KUBERNETES_SERVICE_PORT '{}' is not a port", port));
    }
    kube->port_ = static_cast<int>(*parsed);
  }
  kube->ca_file_ = service_account_dir + "/ca.crt";
  kube->token_file_ = service_account_dir + "/token";
  if (auto ca = ReadFile(kube->ca_file_); !ca.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("--kubernetes: {}: is a service account token mounted into the pod?",
                    MessageOf(ca.status())));
  }
  if (absl::Status token = kube->RefreshToken(); !token.ok()) return token;
  return kube;
}

InClusterKube::~InClusterKube() = default;

absl::Status InClusterKube::RefreshToken() {
  auto token = ReadFile(token_file_);
  if (!token.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("--kubernetes: {}: is a service account token mounted into the pod?",
                    MessageOf(token.status())));
  }
  token_ = std::string(Trim(*token));
  token_read_ = clock_->Now();
  return absl::OkStatus();
}

absl::StatusOr<KubeResponse> InClusterKube::Call(std::string_view method, const std::string& path,
                                                 std::string_view content_type,
                                                 const std::string& body) {
  if (clock_->Now() - token_read_ > absl::Minutes(1)) {
    if (absl::Status refreshed = RefreshToken(); !refreshed.ok()) return refreshed;
  }
  auto answer = Send(method, path, content_type, body);
  if (answer.ok() && answer->status == 401) {
    // A rotated token may have been mounted since the last read: re-read it and try once more.
    const std::string old_token = token_;
    if (RefreshToken().ok() && token_ != old_token) return Send(method, path, content_type, body);
  }
  return answer;
}

absl::StatusOr<KubeResponse> InClusterKube::Send(std::string_view method, const std::string& path,
                                                 std::string_view content_type,
                                                 const std::string& body) {
  httplib::SSLClient client(host_, port_);
  client.set_ca_cert_path(ca_file_.c_str());
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  client.set_write_timeout(10, 0);
  client.set_bearer_token_auth(token_.c_str());
  // Named, with the version, as API Priority and Fairness and audit logs show it.
  static const std::string user_agent = fmt::format("vigil/{} (healthcheck)", kVersion);
  const httplib::Headers headers = {{"Accept", "application/json"}, {"User-Agent", user_agent}};
  const std::string type(content_type);
  auto send = [&]() -> httplib::Result {
    if (method == "POST") return client.Post(path.c_str(), headers, body, type.c_str());
    if (method == "PATCH") return client.Patch(path.c_str(), headers, body, type.c_str());
    return client.Get(path.c_str(), headers);
  };
  if (method != "GET" && method != "POST" && method != "PATCH") {
    return absl::InvalidArgumentError(fmt::format("unsupported method {}", method));
  }
  httplib::Result result = send();
  if (!result) {
    return absl::UnavailableError(fmt::format("the API server at {}:{} did not answer: {}", host_,
                                              port_, httplib::to_string(result.error())));
  }
  KubeResponse response{result->status, result->body};
  if (result->has_header("Retry-After")) {
    // Seconds (APF sends those); an HTTP date or garbage is ignored: the backoff still applies.
    int64_t seconds = 0;
    if (absl::SimpleAtoi(result->get_header_value("Retry-After"), &seconds) && seconds > 0) {
      response.retry_after = absl::Seconds(std::min<int64_t>(seconds, 600));
    }
  }
  return response;
}

}  // namespace vigil
