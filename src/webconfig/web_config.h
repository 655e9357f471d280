// The web config of an HTTP endpoint (--web-config-file), in the Prometheus exporter-toolkit's
// format as dcgm-exporter and node_exporter read it (docs/web-config.md): tls_server_config
// (cert_file/key_file or inline cert/key, client_auth_type, client_ca_file or client_ca,
// client_allowed_sans, min_version, max_version, cipher_suites, prefer_server_cipher_suites,
// curve_preferences), http_server_config (http2, headers) and basic_auth_users (bcrypt hashes).
// Loading checks everything — files, the key against its certificate, names of versions, suites,
// curves and headers, the hashes — and each mistake is one line naming the file and the key.
// Pure functions and values: thread-compatible.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace vigil::webconfig {

// Go's tls.ClientAuthType, by the names the format uses.
enum class ClientAuth {
  kNoClientCert,
  kRequestClientCert,
  kRequireAnyClientCert,
  kVerifyClientCertIfGiven,
  kRequireAndVerifyClientCert,
};

struct TlsServerConfig {
  std::string cert_pem;  // read from cert_file, or inline `cert`
  std::string key_pem;
  std::string client_ca_pem;  // "" without one
  ClientAuth client_auth = ClientAuth::kNoClientCert;
  std::vector<std::string> client_allowed_sans;
  int min_version = 0;  // OpenSSL's TLS1_2_VERSION etc.
  int max_version = 0;
  std::string ciphers;  // OpenSSL's names, ':'-separated; "" for the defaults
  bool prefer_server_cipher_suites = true;
  std::string groups;              // OpenSSL's curve names, ':'-separated; "" for the defaults
  std::vector<std::string> files;  // the files it was read from (watched for changes)
};

struct WebConfig {
  std::optional<TlsServerConfig> tls;
  std::map<std::string, std::string> headers;           // http_server_config.headers
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash
};

// Reads and checks `path` (relative file names in it are relative to its directory, as the
// exporter-toolkit resolves them). InvalidArgument / NotFound with "PATH: KEY: what is wrong".
absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path, absl::Time now);

// The OpenSSL server context for `config`: its certificate and key, the client certificate policy
// and CA, the versions, suites, curves. InvalidArgument when OpenSSL refuses part of it.
absl::StatusOr<std::shared_ptr<SSL_CTX>> MakeServerContext(const TlsServerConfig& config,
                                                           const std::string& path);

// Whether `password` is the one `hash` (bcrypt: $2a$, $2b$, $2y$) was made from.
bool BcryptMatches(const std::string& password, const std::string& hash);

}  // namespace vigil::webconfig
