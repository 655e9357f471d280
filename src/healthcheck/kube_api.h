// The Kubernetes API as the health check uses it: one HTTPS request at a time to the API server,
// authenticated with the pod's service account. An interface, so tests can put a fake API server
// (which checks requests as the real one would) in its place.
// Thread-safety: Call() may be called from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace vigil {

struct KubeResponse {
  int status = 0;
  std::string body;
  // Retry-After (seconds), as API Priority and Fairness sends it with a 429; zero when absent.
  absl::Duration retry_after = absl::ZeroDuration();
};

class KubeApi {
 public:
  virtual ~KubeApi() = default;
  // An HTTP request. Transport failures (no connection, TLS) are a non-OK status; an answer with
  // any HTTP status is a response.
  virtual absl::StatusOr<KubeResponse> Call(std::string_view method, const std::string& path,
                                            std::string_view content_type,
                                            const std::string& body) = 0;
};

// The in-cluster API server: $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the token and CA
// of the pod's service account in `service_account_dir` (default
// /var/run/secrets/kubernetes.io/serviceaccount). The token is re-read every minute (bound
// service account tokens rotate).
class InClusterKube : public KubeApi {
 public:
  static constexpr std::string_view kServiceAccountDir =
      "/var/run/secrets/kubernetes.io/serviceaccount";

  // FailedPrecondition with what is missing (not in a cluster, no token...). `clock` (not
  // owned) times the token re-reads.
  static absl::StatusOr<std::unique_ptr<InClusterKube>> Create(
      const std::string& service_account_dir, Clock* clock = Clock::Real());
  ~InClusterKube() override;

  absl::StatusOr<KubeResponse> Call(std::string_view method, const std::string& path,
                                    std::string_view content_type,
                                    const std::string& body) override;

 private:
  explicit InClusterKube(Clock* clock) : clock_(clock) {}
  absl::Status RefreshToken();
  absl::StatusOr<KubeResponse> Send(std::string_view method, const std::string& path,
                                    std::string_view content_type, const std::string& body);

  Clock* const clock_;
  std::string host_;
  int port_ = 443;
  std::string ca_file_, token_file_, token_;
  absl::Time token_read_ = absl::InfinitePast();
};

}  // namespace vigil
