// Who may do what: the engine's authorisation of each call.
//
// - Over the Unix socket: anyone may read; privileged acts (inject, reset, clear) are allowed to
//   root and to the uids listed in the engine config (injection.allowed_uids), identified by the
//   kernel (SO_PEERCRED at connect time), not by anything the client says.
// - Over TCP with mutual TLS: a client certificate the engine's --tls-client-ca verified may do
//   what the engine config's tls_clients grants its identity (a SAN or its CN); with no
//   tls_clients at all, any such certificate may read and none is privileged by itself.
// - Over TCP, the injection token from --inject-token-file ("authorization: Bearer TOKEN",
//   compared in constant time) allows every privileged act — over TLS only: a token over plain
//   TCP is readable by anyone who can capture the node's traffic, and is refused unless the
//   engine was started with --insecure-token-over-plaintext.
// - Everything else (in-process callers, unknown transports) is refused privileged acts.
// Refusals are PERMISSION_DENIED with a message that says how to enable it.
// Thread-safety: Authorize() is const and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/principal.h"
#include "tls/peer.h"

namespace vigil {

struct PeerCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
};

// What the server knows about the caller of one RPC.
struct Caller {
  std::string transport;                            // "unix", "tcp", "inproc" or "unknown"
  bool tls = false;                                 // tcp: the connection is TLS
  std::optional<tls::PeerCertificate> certificate;  // tcp over mutual TLS: the verified client's
  std::optional<PeerCredentials> credentials;       // Unix socket only
  std::optional<std::string> bearer_token;          // from the authorization metadata
  std::string peer;                                 // gRPC's peer string, for audit records
};

struct AuthorizerOptions {
  std::vector<uint32_t> allowed_uids;       // injection.allowed_uids
  std::string token;                        // empty: no token is accepted
  std::vector<TlsClientGrant> tls_clients;  // the engine config's tls_clients
  bool token_over_plaintext = false;        // --insecure-token-over-plaintext
};

class Authorizer {
 public:
  explicit Authorizer(AuthorizerOptions options) : options_(std::move(options)) {}

  // Who the caller is, if it may do `permission`; PermissionDenied saying how to allow it if not.
  absl::StatusOr<Principal> Authorize(const Caller& caller, Permission permission) const;

 private:
  absl::StatusOr<Principal> AuthorizeTcp(const Caller& caller, Permission permission) const;
  // The tls_clients entry that names `certificate`; nullptr when none does.
  const TlsClientGrant* GrantOf(const tls::PeerCertificate& certificate) const;

  const AuthorizerOptions options_;
};

// Reads an injection token file: the token is the file's content without surrounding whitespace,
// at least 16 characters. InvalidArgument / NotFound with the path otherwise.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The user name of `uid` ("root"), or "" when unknown.
std::string UserName(uint32_t uid);

}  // namespace vigil
