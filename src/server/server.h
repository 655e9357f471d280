// Serves an Engine over gRPC: the vigil.v1.Engine service, grpc.health.v1 and server
// reflection, on a Unix socket and/or a TCP address.
//
// Start-up checks turn the likely mistakes into one clear error each: a TCP port already in use,
// a socket directory that cannot be created or written, a socket path that is not a socket, and
// another engine already listening on the socket. A stale socket file left by a crashed engine
// (nobody accepting on it) is replaced.
// Thread-safety: Start() and Shutdown() from one owning thread. Must be destroyed before the
// Engine it serves.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "grpcpp/server.h"
#include "server/service.h"
#include "server/unix_listener.h"
#include "tls/credentials.h"

namespace vigil {

struct ServerOptions {
  std::string unix_socket_path;       // empty: no Unix socket
  std::string tcp_address;            // "HOST:PORT"; port 0 picks a free port; empty: no TCP
  std::string inject_token;           // empty: no token is accepted over TCP
  tls::ServerTlsOptions tls;          // the TCP listener's TLS; not enabled: plain TCP
  bool token_over_plaintext = false;  // --insecure-token-over-plaintext (authz.h)
};

class EngineServer {
 public:
  static absl::StatusOr<std::unique_ptr<EngineServer>> Start(Engine* engine,
                                                             const ServerOptions& options);
  ~EngineServer();

  // The TCP port actually bound (useful with port 0); 0 without TCP.
  int tcp_port() const { return tcp_port_; }
  // A channel to this server that bypasses the network, for clients in the same process.
  std::shared_ptr<grpc::Channel> InProcessChannel();

  // Ends every subscription with UNAVAILABLE, stops accepting calls, waits up to `grace` for
  // calls in flight, then removes the socket file. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  EngineServer(Engine* engine, ServerOptions options)
      : engine_(engine),
        options_(std::move(options)),
        service_(engine, &peers_,
                 Authorizer({.allowed_uids = engine->config().injection_allowed_uids,
                             .token = options_.inject_token,
                             .tls_clients = engine->config().tls_clients,
                             .token_over_plaintext = options_.token_over_plaintext})) {}

  Engine* const engine_;
  const ServerOptions options_;
  PeerRegistry peers_;
  EngineService service_;
  std::unique_ptr<UnixListener> unix_listener_;
  std::unique_ptr<grpc::Server> server_;
  int tcp_port_ = 0;
  bool shut_down_ = false;
};

// Checks that `address` ("HOST:PORT") is well formed and its port free. Exposed for tests.
absl::Status CheckTcpAddress(const std::string& address);
// Prepares `path` for a listening Unix socket (see the file comment). Exposed for tests.
absl::Status PrepareUnixSocketPath(const std::string& path);

}  // namespace vigil
