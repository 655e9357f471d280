// Implements the in-cluster API client over cpp-httplib's TLS client (OpenSSL), verifying the
// API server against the service account's CA. Each request opens its own connection, so
// requests from several threads share only the token (under its mutex).
#include "kube/kube_api.h"

#include <algorithm>
#include <cstdlib>

#include "common/files.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/version.h"
#include "fmt/format.h"
#include "httplib.h"

namespace vigil::kube {

void StreamCanceller::Cancel() {
  // Under the lock: the interrupt refers to the stream's HTTP client, which lives until the
  // stream clears the interrupt (SetInterrupt(nullptr) waits for this). The interrupt takes the
  // client's socket lock, which the stream's thread does not hold while it reads and calls back.
  absl::MutexLock lock(&mutex_);
  cancelled_ = true;
  if (interrupt_) interrupt_();
}

bool StreamCanceller::cancelled() const {
  absl::MutexLock lock(&mutex_);
  return cancelled_;
}

bool StreamCanceller::SetInterrupt(std::function<void()> interrupt) {
  absl::MutexLock lock(&mutex_);
  if (cancelled_ && interrupt) return false;
  interrupt_ = std::move(interrupt);
  return true;
}

InClusterKube::InClusterKube(Clock* clock, std::string_view component)
    : clock_(clock), user_agent_(fmt::format("vigil/{} ({})", kVersion, component)) {}

absl::StatusOr<std::unique_ptr<InClusterKube>> InClusterKube::Create(
    const std::string& service_account_dir, std::string_view component, Clock* clock) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') {
    return absl::FailedPreconditionError(
        "the Kubernetes API: KUBERNETES_SERVICE_HOST is not set: this is not running in a "
        "Kubernetes pod (outside a cluster, drop --kubernetes; the remediator runs only in "
        "one)");
  }
  std::unique_ptr<InClusterKube> kube(new InClusterKube(clock, component));
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
  absl::MutexLock lock(&kube->token_mutex_);
  if (auto token = kube->RefreshToken(); !token.ok()) return token.status();
  return kube;
}

InClusterKube::~InClusterKube() = default;

absl::StatusOr<std::string> InClusterKube::RefreshToken() {
  auto token = ReadFile(token_file_);
  if (!token.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("--kubernetes: {}: is a service account token mounted into the pod?",
                    MessageOf(token.status())));
  }
  token_ = std::string(Trim(*token));
  token_read_ = clock_->Now();
  return token_;
}

absl::StatusOr<std::string> InClusterKube::Token(const std::string* rejected) {
  absl::MutexLock lock(&token_mutex_);
  if (rejected != nullptr ? *rejected == token_ : clock_->Now() - token_read_ > absl::Minutes(1)) {
    return RefreshToken();
  }
  return token_;
}

absl::StatusOr<KubeResponse> InClusterKube::WithToken(
    const std::function<absl::StatusOr<KubeResponse>(const std::string& token)>& attempt) {
  auto token = Token();
  if (!token.ok()) return token.status();
  auto answer = attempt(*token);
  if (answer.ok() && answer->status == 401) {
    auto reread = Token(&*token);
    if (reread.ok() && *reread != *token) return attempt(*reread);
  }
  return answer;
}

absl::StatusOr<KubeResponse> InClusterKube::Call(std::string_view method, const std::string& path,
                                                 std::string_view content_type,
                                                 const std::string& body) {
  if (method != "GET" && method != "POST" && method != "PATCH" && method != "PUT" &&
      method != "DELETE") {
    return absl::InvalidArgumentError(fmt::format("unsupported method {}", method));
  }
  return WithToken(
      [&](const std::string& token) { return Send(method, path, content_type, body, token); });
}

absl::StatusOr<KubeResponse> InClusterKube::Stream(const std::string& path,
                                                   const LineHandler& on_line,
                                                   StreamCanceller* cancel) {
  return WithToken(
      [&](const std::string& token) { return SendStream(path, on_line, cancel, token); });
}

namespace {

// Retry-After in seconds (APF sends those); an HTTP date or garbage is ignored: the caller's
// backoff still applies.
absl::Duration RetryAfter(const httplib::Response& response) {
  if (!response.has_header("Retry-After")) return absl::ZeroDuration();
  const std::optional<uint64_t> seconds = ParseUint64(response.get_header_value("Retry-After"));
  if (!seconds.has_value() || *seconds == 0) return absl::ZeroDuration();
  return absl::Seconds(std::min<uint64_t>(*seconds, 600));
}

// Verifies the API server against the service account's CA; sends the bearer token.
void Configure(httplib::SSLClient& client, const std::string& ca_file, const std::string& token,
               absl::Duration read_timeout) {
  client.set_ca_cert_path(ca_file.c_str());
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(absl::ToInt64Seconds(read_timeout), 0);
  client.set_write_timeout(10, 0);
  client.set_bearer_token_auth(token.c_str());
}

httplib::Headers Headers(const std::string& user_agent) {
  return {{"Accept", "application/json"}, {"User-Agent", user_agent}};
}

}  // namespace

absl::StatusOr<KubeResponse> InClusterKube::Send(std::string_view method, const std::string& path,
                                                 std::string_view content_type,
                                                 const std::string& body,
                                                 const std::string& token) {
  httplib::SSLClient client(host_, port_);
  Configure(client, ca_file_, token, absl::Seconds(10));
  const httplib::Headers headers = Headers(user_agent_);
  const std::string type(content_type);
  httplib::Result result = [&] {
    if (method == "POST") return client.Post(path.c_str(), headers, body, type.c_str());
    if (method == "PATCH") return client.Patch(path.c_str(), headers, body, type.c_str());
    if (method == "PUT") return client.Put(path.c_str(), headers, body, type.c_str());
    if (method == "DELETE") return client.Delete(path.c_str(), headers, body, type.c_str());
    return client.Get(path.c_str(), headers);
  }();
  if (!result) {
    return absl::UnavailableError(fmt::format("the API server at {}:{} did not answer: {}", host_,
                                              port_, httplib::to_string(result.error())));
  }
  return KubeResponse{result->status, result->body, RetryAfter(*result)};
}

absl::StatusOr<KubeResponse> InClusterKube::SendStream(const std::string& path,
                                                       const LineHandler& on_line,
                                                       StreamCanceller* cancel,
                                                       const std::string& token) {
  httplib::SSLClient client(host_, port_);
  Configure(client, ca_file_, token, kStreamReadTimeout);
  const httplib::Headers headers = Headers(user_agent_);
  if (cancel != nullptr && !cancel->SetInterrupt([&client] { client.stop(); })) {
    return absl::CancelledError("the stream was cancelled");
  }
  int status = 0;
  std::string partial, error_body;
  bool handler_ended = false;
  httplib::Result result = client.Get(
      path.c_str(), headers,
      [&](const httplib::Response& response) {
        status = response.status;
        // A Cancel() that came before the connection was made found nothing to interrupt.
        return cancel == nullptr || !cancel->cancelled();
      },
      [&](const char* data, size_t length) {
        if (cancel != nullptr && cancel->cancelled()) return false;
        if (status < 200 || status >= 300) {
          if (error_body.size() < 64 * 1024) error_body.append(data, length);
          return true;
        }
        partial.append(data, length);
        size_t begin = 0;
        for (size_t end; (end = partial.find('\n', begin)) != std::string::npos; begin = end + 1) {
          if (!on_line(std::string_view(partial).substr(begin, end - begin))) {
            handler_ended = true;
            return false;
          }
        }
        partial.erase(0, begin);
        return true;
      });
  if (cancel != nullptr) cancel->SetInterrupt(nullptr);
  if (cancel != nullptr && cancel->cancelled()) {
    return absl::CancelledError("the stream was cancelled");
  }
  if (handler_ended) return KubeResponse{status, "", absl::ZeroDuration()};
  if (!result) {
    return absl::UnavailableError(fmt::format("the stream from the API server at {}:{} broke: {}",
                                              host_, port_, httplib::to_string(result.error())));
  }
  if (!partial.empty() && status >= 200 && status < 300) on_line(partial);
  return KubeResponse{result->status, std::move(error_body), RetryAfter(*result)};
}

}  // namespace vigil::kube
