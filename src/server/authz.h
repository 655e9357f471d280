// Who may inject: the engine's authorisation of privileged calls (injections, clears).
//
// - Over the Unix socket: root, and the uids listed in the engine config (injection.allowed_uids),
//   identified by the kernel (SO_PEERCRED at connect time), not by anything the client says.
// - Over TCP: only with the injection token from --inject-token-file, sent by the client as
//   "authorization: Bearer TOKEN" and compared in constant time; with no token file, TCP
//   injection is off.
// - Everything else (in-process callers, unknown transports) is refused.
// Refusals are PERMISSION_DENIED with a message that says how to enable it. Read-only calls are
// not checked at all.
// Thread-safety: Authorize() is const and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/principal.h"

namespace vigil {

struct PeerCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
};

// What the server knows about the caller of one RPC.
struct Caller {
  std::string transport;                       // "unix", "tcp", "inproc" or "unknown"
  std::optional<PeerCredentials> credentials;  // Unix socket only
  std::optional<std::string> bearer_token;     // from the authorization metadata
  std::string peer;                            // gRPC's peer string, for audit records
};

class Authorizer {
 public:
  // `token` empty: TCP injection is off.
  Authorizer(std::vector<uint32_t> allowed_uids, std::string token)
      : allowed_uids_(std::move(allowed_uids)), token_(std::move(token)) {}

  absl::StatusOr<Principal> Authorize(const Caller& caller) const;

 private:
  std::vector<uint32_t> allowed_uids_;
  std::string token_;
};

// Reads an injection token file: the token is the file's content without surrounding whitespace,
// at least 16 characters. InvalidArgument / NotFound with the path otherwise.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The user name of `uid` ("root"), or "" when unknown.
std::string UserName(uint32_t uid);

}  // namespace vigil
