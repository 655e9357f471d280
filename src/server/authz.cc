// Implements the authorisation of privileged calls.
#include "server/authz.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pwd.h>
#include <sys/stat.h>

#include <algorithm>

#include "common/files.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

// Compares without leaking where they differ or how long the token is: both sides are hashed to
// fixed-size digests, which are compared in constant time.
bool TokensMatch(const std::string& given, const std::string& expected) {
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), b);
  return CRYPTO_memcmp(a, b, SHA256_DIGEST_LENGTH) == 0;
}

}  // namespace

std::string UserName(uint32_t uid) {
  passwd entry{};
  passwd* result = nullptr;
  char buffer[1024];
  if (getpwuid_r(uid, &entry, buffer, sizeof(buffer), &result) == 0 && result != nullptr) {
    return result->pw_name;
  }
  return "";
}

absl::StatusOr<Principal> Authorizer::Authorize(const Caller& caller, Permission permission) const {
  const std::string_view act = PermissionName(permission);
  if (caller.transport == "unix") {
    if (permission == Permission::kRead) return Principal{.transport = "unix"};
    if (!caller.credentials) {
      return absl::PermissionDeniedError(fmt::format(
          "the engine could not identify the caller on its Unix socket; {} refused", act));
    }
    const PeerCredentials& creds = *caller.credentials;
    const std::string name = UserName(creds.uid);
    const std::string who =
        fmt::format("uid {}{} pid {}", creds.uid, name.empty() ? "" : " (" + name + ")", creds.pid);
    const bool allowed =
        creds.uid == 0 || std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(),
                                    creds.uid) != options_.allowed_uids.end();
    if (!allowed) {
      return absl::PermissionDeniedError(fmt::format(
          "{} is a privileged act: over the Unix socket it is allowed to root and to the uids "
          "under injection.allowed_uids in the engine config; {} is neither (run as root, or add "
          "uid {} to the config)",
          act, who, creds.uid));
    }
    return Principal{.transport = "unix", .uid = creds.uid, .pid = creds.pid, .description = who};
  }
  if (caller.transport == "tcp") return AuthorizeTcp(caller, permission);
  if (permission == Permission::kRead) return Principal{.transport = caller.transport};
  return absl::PermissionDeniedError(fmt::format(
      "{} is not allowed over the {} transport: use the Unix socket as root, or TCP with TLS and "
      "a client certificate or the injection token",
      act, caller.transport));
}

const TlsClientGrant* Authorizer::GrantOf(const tls::PeerCertificate& certificate) const {
  for (const TlsClientGrant& grant : options_.tls_clients) {
    if (certificate.Names(grant.identity)) return &grant;
  }
  return nullptr;
}

absl::StatusOr<Principal> Authorizer::AuthorizeTcp(const Caller& caller,
                                                   Permission permission) const {
  const std::string_view act = PermissionName(permission);
  if (caller.certificate) {
    const std::string identity = caller.certificate->Identity();
    const TlsClientGrant* grant = GrantOf(*caller.certificate);
    const bool listed = grant != nullptr;
    if (listed && grant->may.contains(permission)) {
      return Principal{.transport = "tls",
                       .description = fmt::format("certificate {} from {}", identity, caller.peer)};
    }
    if (permission == Permission::kRead && options_.tls_clients.empty()) {
      return Principal{.transport = "tls", .description = "certificate " + identity};
    }
    if (permission == Permission::kRead || !caller.bearer_token) {
      return absl::PermissionDeniedError(fmt::format(
          "the client certificate {} may not {} on this engine: {} (the engine config's "
          "tls_clients)",
          identity, act,
          listed ? fmt::format("add {} to its `may`", act)
                 : fmt::format(
                       "list it with `- {{identity: {}, may: [{}]}}`", identity,
                       permission == Permission::kRead ? "read" : fmt::format("read, {}", act))));
    }
    // A certificate without the grant may still carry the token: checked below.
  }
  if (permission == Permission::kRead) return Principal{.transport = "tcp"};
  if (options_.token.empty()) {
    return absl::PermissionDeniedError(fmt::format(
        "{} over TCP is off on this engine: start it with --tls-cert, --tls-key and "
        "--tls-client-ca and grant the client certificate `{}` under tls_clients in its config, "
        "or give it --inject-token-file; or use the Unix socket as root",
        act, act));
  }
  if (!caller.bearer_token) {
    return absl::PermissionDeniedError(fmt::format(
        "{} over TCP needs a client certificate the engine grants it, or the engine's injection "
        "token: pass --token-file FILE (the file given to the engine's --inject-token-file)",
        act));
  }
  if (!caller.tls && !options_.token_over_plaintext) {
    return absl::PermissionDeniedError(
        "the injection token is refused over plain TCP, where anyone who can capture the node's "
        "traffic can read it: start the engine with --tls-cert and --tls-key and connect with "
        "--tls-ca (or a tls:// address); or start it with --insecure-token-over-plaintext to "
        "accept that risk");
  }
  if (!TokensMatch(*caller.bearer_token, options_.token)) {
    return absl::PermissionDeniedError(
        "the injection token does not match the engine's --inject-token-file");
  }
  return Principal{.transport = "tcp",
                   .description = fmt::format("token from {}{}", caller.peer,
                                              caller.tls ? " over TLS" : " over plain TCP")};
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  const std::string token(Trim(*text));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the injection token must be at least 16 characters (e.g. `openssl rand -hex 32`)",
        path));
  }
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        fmt::format("{}: the injection token must be one line without spaces", path));
  }
  struct stat info {};
  if (stat(path.c_str(), &info) == 0 && (info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    spdlog::warn(
        "{} is readable by others (mode {:o}): anyone who can read it can inject; "
        "chmod 600 it",
        path, info.st_mode & 0777);
  }
  return token;
}

}  // namespace vigil
