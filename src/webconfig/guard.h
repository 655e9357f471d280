// An HTTP endpoint's web config in force (HttpGuard): TLS on new connections, basic auth on each
// request, the configured headers on every response. The file (and the certificate, key and CA
// files it names) are checked for changes at most once a second, on the server's thread as a
// connection is accepted; a changed config that loads replaces the old one for new connections
// and requests, one that does not is logged once and the old one stays. A password that matched
// is remembered (its SHA-256 with the user and hash), so bcrypt runs once per credentials, not
// per scrape. `/healthz` is answered without credentials, for probes.
// Thread-safety: Load() anywhere; the HttpGuard methods on the HTTP server's thread only.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/clock.h"
#include "common/http_server.h"
#include "webconfig/web_config.h"

namespace vigil::webconfig {

class WebConfigGuard : public HttpGuard {
 public:
  // Loads and checks `path` (web_config.h); its error otherwise. `clock` is not owned.
  static absl::StatusOr<std::unique_ptr<WebConfigGuard>> Load(const std::string& path,
                                                              Clock* clock);

  std::shared_ptr<SSL_CTX> TlsContext() override;
  std::optional<HttpResponse> Check(const HttpRequest& request) override;
  std::string ExtraHeaders() override;

  // What the log says of it at start: "TLS (client certificates required), basic auth (2 users)".
  std::string Describe() const;
  // Whether it serves TLS now.
  bool tls() const { return tls_context_ != nullptr; }

 private:
  struct Stamp {
    int64_t mtime_ns = 0;
    int64_t size = -1;
    bool operator==(const Stamp&) const = default;
  };
  WebConfigGuard(std::string path, Clock* clock) : path_(std::move(path)), clock_(clock) {}
  // Replaces what is in force with `config`; its error when its TLS context cannot be made.
  absl::Status Apply(WebConfig config);
  std::map<std::string, Stamp> StampFiles() const;
  void ReloadIfChanged();

  const std::string path_;
  Clock* const clock_;
  WebConfig config_;
  std::shared_ptr<SSL_CTX> tls_context_;  // nullptr: plain HTTP
  std::string extra_headers_;
  std::map<std::string, Stamp> stamps_;  // the files as they were when last read
  absl::Time next_check_;
  std::set<std::string> accepted_;  // digests of credentials that matched
};

}  // namespace vigil::webconfig
