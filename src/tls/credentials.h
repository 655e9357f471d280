// gRPC credentials from TLS files: the engine's TCP listener (TLS, and mutual TLS with a client CA)
// and a client's channel. The files are watched by gRPC's FileWatcherCertificateProvider: every
// `reload_interval` it re-reads them and, when they changed and the key matches the certificate,
// new handshakes use them (cert-manager and the kubelet rotate them in place); connections and
// streams already open keep theirs. A rotation to files that do not load is logged by gRPC and the
// previous ones stay in use.
// Thread-safety: the functions are thread-safe; the credentials are gRPC's (thread-safe).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace vigil::tls {

inline constexpr absl::Duration kDefaultReloadInterval = absl::Minutes(1);

struct ServerTlsOptions {
  std::string cert_file;  // PEM chain, leaf first
  std::string key_file;   // PEM, unencrypted
  std::string
      client_ca_file;  // PEM bundle; non-empty: clients must present a certificate it signed
  absl::Duration reload_interval = kDefaultReloadInterval;

  bool enabled() const { return !cert_file.empty(); }
};

struct ClientTlsOptions {
  bool enabled = false;   // tls:// addresses, or any of the files given
  std::string ca_file;    // the engine's CA; empty: the system's roots
  std::string cert_file;  // a client certificate, for mutual TLS (with key_file)
  std::string key_file;
  std::string server_name;  // the name the engine's certificate must carry; empty: the host dialled
  absl::Duration reload_interval = kDefaultReloadInterval;
};

// Checks the files (certificates.h; the flags named as the engine's: --tls-cert, --tls-key,
// --tls-client-ca) and builds the listener's credentials. InvalidArgument / NotFound naming the
// flag and the file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options, absl::Time now);

// The same for a client (--tls-ca, --tls-cert, --tls-key); `options.enabled` must be true.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options, absl::Time now);

}  // namespace vigil::tls
