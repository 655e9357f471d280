// The Kubernetes API as Vigil's components use it: HTTPS requests and streamed watches to the API
// server, authenticated with the pod's service account. An interface, so tests can put a fake
// API server (which checks requests as the real one would) in its place.
// Thread-safety: Call() and Stream() may be called from several threads at once (the health
// check's reporter and its informer); StreamCanceller::Cancel() from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace vigil::kube {

struct KubeResponse {
  int status = 0;
  std::string body;
  // Retry-After (seconds), as API Priority and Fairness sends it with a 429; zero when absent.
  absl::Duration retry_after = absl::ZeroDuration();
};

// Ends a Stream() in progress from another thread. A stream that has not begun does not begin;
// one blocked in a read is interrupted (its socket shut down); one connecting when Cancel() comes
// ends at its first answer — or at the next Cancel(), which is why callers repeat it until the
// stream has returned.
class StreamCanceller {
 public:
  // Idempotent; may be called again (an interrupt that raced the stream's connect is repeated).
  void Cancel();
  bool cancelled() const;
  // For implementations: how to interrupt the stream in progress (nullptr: none in progress).
  // Returns false when already cancelled (then the stream must not begin).
  bool SetInterrupt(std::function<void()> interrupt);

 private:
  mutable absl::Mutex mutex_;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  std::function<void()> interrupt_ ABSL_GUARDED_BY(mutex_);
};

// Content types of the requests Vigil sends.
inline constexpr std::string_view kJsonContent = "application/json";
inline constexpr std::string_view kMergePatch = "application/merge-patch+json";
inline constexpr std::string_view kStrategicMergePatch = "application/strategic-merge-patch+json";

class KubeApi {
 public:
  // Called with each line of a streamed body (without its newline); false ends the stream.
  using LineHandler = std::function<bool(std::string_view line)>;

  virtual ~KubeApi() = default;
  // An HTTP request: GET, POST, PATCH, PUT or DELETE (another method is InvalidArgument). Transport
  // failures (no connection, TLS) are a non-OK status; an answer with any HTTP status is a
  // response.
  virtual absl::StatusOr<KubeResponse> Call(std::string_view method, const std::string& path,
                                            std::string_view content_type,
                                            const std::string& body) = 0;
  // A streamed GET (a watch): the lines of a 2xx body go to `on_line` as they arrive and the
  // response's body stays empty; a non-2xx answer is returned whole. The stream ends when the
  // server ends the body, `on_line` returns false, or `cancel` (not owned, may be null) is
  // cancelled. A connection that fails or drops before the server ends the body, and a
  // cancelled stream, are a non-OK status (Cancelled for the latter).
  virtual absl::StatusOr<KubeResponse> Stream(const std::string& path, const LineHandler& on_line,
                                              StreamCanceller* cancel) = 0;
};

// The in-cluster API server: $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the token and CA
// of the pod's service account in `service_account_dir` (default
// /var/run/secrets/kubernetes.io/serviceaccount). The token is re-read every minute (bound
// service account tokens rotate). Every request names Vigil, its version and `component`
// ("vigil/0.2.0 (healthcheck)") as its User-Agent, as API Priority and Fairness and the audit
// log show it.
class InClusterKube : public KubeApi {
 public:
  static constexpr std::string_view kServiceAccountDir =
      "/var/run/secrets/kubernetes.io/serviceaccount";

  // FailedPrecondition with what is missing (not in a cluster, no token...). `clock` (not
  // owned) times the token re-reads.
  static absl::StatusOr<std::unique_ptr<InClusterKube>> Create(
      const std::string& service_account_dir, std::string_view component,
      Clock* clock = Clock::Real());
  ~InClusterKube() override;

  absl::StatusOr<KubeResponse> Call(std::string_view method, const std::string& path,
                                    std::string_view content_type,
                                    const std::string& body) override;
  absl::StatusOr<KubeResponse> Stream(const std::string& path, const LineHandler& on_line,
                                      StreamCanceller* cancel) override;

  // How long a stream may go without a byte before it counts as dropped (a connection a NAT or
  // load balancer forgot): the API server sends a watch a bookmark about every minute, so five
  // minutes of silence is a dead connection, and the watch is opened again.
  static constexpr absl::Duration kStreamReadTimeout = absl::Minutes(5);

 private:
  InClusterKube(Clock* clock, std::string_view component);
  // The token to send: re-read when a minute old, or when `rejected` (a 401 with it) names the
  // token the server refused. FailedPrecondition when it cannot be read.
  absl::StatusOr<std::string> Token(const std::string* rejected = nullptr);
  absl::StatusOr<std::string> RefreshToken() ABSL_EXCLUSIVE_LOCKS_REQUIRED(token_mutex_);
  // A 401 means a rotated token may be mounted since the last read: `attempt` runs again once
  // with a re-read token that differs from the refused one.
  absl::StatusOr<KubeResponse> WithToken(
      const std::function<absl::StatusOr<KubeResponse>(const std::string& token)>& attempt);
  absl::StatusOr<KubeResponse> Send(std::string_view method, const std::string& path,
                                    std::string_view content_type, const std::string& body,
                                    const std::string& token);
  absl::StatusOr<KubeResponse> SendStream(const std::string& path, const LineHandler& on_line,
                                          StreamCanceller* cancel, const std::string& token);

  Clock* const clock_;
  const std::string user_agent_;
  std::string host_;
  int port_ = 443;
  std::string ca_file_, token_file_;

  absl::Mutex token_mutex_;
  std::string token_ ABSL_GUARDED_BY(token_mutex_);
  absl::Time token_read_ ABSL_GUARDED_BY(token_mutex_) = absl::InfinitePast();
};

}  // namespace vigil::kube
