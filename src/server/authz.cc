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

absl::StatusOr<Principal> Authorizer::Authorize(const Caller& caller) const {
  if (caller.transport == "unix") {
    if (!caller.credentials) {
      return absl::PermissionDeniedError(
          "the engine could not identify the caller on its Unix socket; injection refused");
    }
    const PeerCredentials& creds = *caller.credentials;
    const std::string name = UserName(creds.uid);
    const std::string who =
        fmt::format("uid {}{} pid {}", creds.uid, name.empty() ? "" : " (" + name + ")", creds.pid);
    const bool allowed = creds.uid == 0 || std::find(allowed_uids_.begin(), allowed_uids_.end(),
                                                     creds.uid) != allowed_uids_.end();
    if (!allowed) {
      return absl::PermissionDeniedError(fmt::format(
          "injection is a privileged act: over the Unix socket it is allowed to root and to the "
          "uids under injection.allowed_uids in the engine config; {} is neither (run as root, "
          "or add uid {} to the config)",
          who, creds.uid));
    }
    return Principal{.transport = "unix", .uid = creds.uid, .pid = creds.pid, .description = who};
  }
  if (caller.transport == "tcp") {
    if (token_.empty()) {
      return absl::PermissionDeniedError(
          "injection over TCP is off on this engine: start it with --inject-token-file FILE and "
          "pass --token-file FILE to the client, or inject over the Unix socket as root");
    }
    if (!caller.bearer_token) {
      return absl::PermissionDeniedError(
          "injection over TCP needs the engine's injection token: pass --token-file FILE (the "
          "file given to the engine's --inject-token-file)");
    }
    if (!TokensMatch(*caller.bearer_token, token_)) {
      return absl::PermissionDeniedError(
          "the injection token does not match the engine's --inject-token-file");
    }
    return Principal{.transport = "tcp", .description = "token from " + caller.peer};
  }
  return absl::PermissionDeniedError(fmt::format(
      "injection is not allowed over the {} transport: use the Unix socket as root, or TCP with "
      "the injection token",
      caller.transport));
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
