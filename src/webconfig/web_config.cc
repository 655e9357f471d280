// Implements the web config's loading, its checks, and its OpenSSL server context.
#include "webconfig/web_config.h"

#include <crypt.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <array>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "common/files.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/yaml.h"
#include "fmt/format.h"
#include "tls/certificates.h"

namespace vigil::webconfig {
namespace {

constexpr std::array<std::pair<std::string_view, ClientAuth>, 5> kClientAuth = {{
    {"NoClientCert", ClientAuth::kNoClientCert},
    {"RequestClientCert", ClientAuth::kRequestClientCert},
    {"RequireAnyClientCert", ClientAuth::kRequireAnyClientCert},
    {"VerifyClientCertIfGiven", ClientAuth::kVerifyClientCertIfGiven},
    {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerifyClientCert},
}};

constexpr std::array<std::pair<std::string_view, int>, 4> kVersions = {{
    {"TLS10", TLS1_VERSION},
    {"TLS11", TLS1_1_VERSION},
    {"TLS12", TLS1_2_VERSION},
    {"TLS13", TLS1_3_VERSION},
}};

// Go's tls.CurveID names and OpenSSL's.
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kCurves = {{
    {"CurveP256", "P-256"},
    {"CurveP384", "P-384"},
    {"CurveP521", "P-521"},
    {"X25519", "X25519"},
}};

// The headers the format allows, and the values it accepts ("" any).
constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kHeaders = {{
    {"Content-Security-Policy", ""},
    {"X-Frame-Options", "deny|sameorigin"},
    {"X-Content-Type-Options", "nosniff"},
    {"X-XSS-Protection", ""},
    {"Strict-Transport-Security", ""},
}};

template <typename T, size_t N>
std::string Names(const std::array<std::pair<std::string_view, T>, N>& table) {
  std::string names;
  for (const auto& [name, value] : table) names += (names.empty() ? "" : ", ") + std::string(name);
  return names;
}

// Go's cipher suite names are the IANA ones, which OpenSSL calls standard names: the OpenSSL
// name of `iana`, or "" for a suite OpenSSL does not offer. TLS 1.3's suites are not
// configurable (in Go either): "-".
std::string OpenSslCipher(const std::string& iana) {
  if (iana == "TLS_AES_128_GCM_SHA256" || iana == "TLS_AES_256_GCM_SHA384" ||
      iana == "TLS_CHACHA20_POLY1305_SHA256") {
    return "-";
  }
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        SSL_CTX_free);
  SSL_CTX_set_security_level(ctx.get(), 0);
  SSL_CTX_set_cipher_list(ctx.get(), "ALL:COMPLEMENTOFALL");
  STACK_OF(SSL_CIPHER)* ciphers = SSL_CTX_get_ciphers(ctx.get());
  for (int i = 0; i < sk_SSL_CIPHER_num(ciphers); ++i) {
    const SSL_CIPHER* cipher = sk_SSL_CIPHER_value(ciphers, i);
    const char* standard = SSL_CIPHER_standard_name(cipher);
    if (standard != nullptr && iana == standard) return SSL_CIPHER_get_name(cipher);
  }
  return "";
}

// A file name of the config, relative to the config's directory.
std::string Resolve(const std::string& config_path, const std::string& name) {
  if (name.empty() || name.front() == '/') return name;
  return (std::filesystem::path(config_path).parent_path() / name).string();
}

// The PEM of `file_key` (a file) or `inline_key` (inline), one of them; "" when neither.
absl::StatusOr<std::string> PemOf(const YAML::Node& node, const yaml::Reader& reader,
                                  const std::string& path, const char* file_key,
                                  const char* inline_key, std::vector<std::string>* files) {
  if (node[file_key] && node[inline_key]) {
    return reader.Error(node, fmt::format("tls_server_config.{}", file_key),
                        fmt::format("give {} or {}, not both", file_key, inline_key));
  }
  if (node[inline_key])
    return reader.String(node[inline_key], fmt::format("tls_server_config.{}", inline_key));
  if (!node[file_key]) return std::string();
  auto name = reader.String(node[file_key], fmt::format("tls_server_config.{}", file_key));
  if (!name.ok()) return name.status();
  const std::string file = Resolve(path, *name);
  auto text = ReadFile(file);
  if (!text.ok())
    return WithContext(text.status(), fmt::format("{}: tls_server_config.{}", path, file_key));
  files->push_back(file);
  return *text;
}

absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& node,
                                                    const yaml::Reader& reader,
                                                    const std::string& key) {
  std::vector<std::string> values;
  if (!node) return values;
  if (!node.IsSequence()) return reader.Error(node, key, "expected a list");
  for (size_t i = 0; i < node.size(); ++i) {
    auto value = reader.String(node[i], fmt::format("{}[{}]", key, i));
    if (!value.ok()) return value.status();
    values.push_back(*value);
  }
  return values;
}

// Writes the PEM certificate chain and key to a check: the certificate files' checks, on text.
absl::Status CheckPair(const std::string& cert_pem, const std::string& key_pem,
                       const std::string& path, absl::Time now) {
  // tls::CheckCertificateAndKey reads files; inline PEM is checked through the same parser here.
  auto certs = tls::ParseCertificates(cert_pem, path + ": tls_server_config.cert_file");
  if (!certs.ok()) return certs.status();
  const tls::CertificateInfo& leaf = certs->front();
  if (now > leaf.not_after) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: tls_server_config: the certificate {} expired at {}: renew it", path, leaf.subject,
        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", leaf.not_after, absl::UTCTimeZone())));
  }
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  const bool matches = cert != nullptr && key != nullptr && X509_check_private_key(cert, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("{}: tls_server_config.key_file: no unencrypted PEM private key in it", path));
  }
  if (!matches) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: tls_server_config.key_file is not the key of the certificate {}: give the key it was "
        "issued for",
        path, leaf.subject));
  }
  return absl::OkStatus();
}

// min_version, max_version, cipher_suites, prefer_server_cipher_suites, curve_preferences.
absl::Status ParseProtocols(const YAML::Node& node, const yaml::Reader& reader,
                            TlsServerConfig* out) {
  TlsServerConfig& tls = *out;
  tls.min_version = TLS1_2_VERSION;
  tls.max_version = TLS1_3_VERSION;
  for (const auto& [key_name, target] :
       {std::pair<const char*, int*>{"min_version", &tls.min_version},
        std::pair<const char*, int*>{"max_version", &tls.max_version}}) {
    if (!node[key_name]) continue;
    const std::string where = fmt::format("tls_server_config.{}", key_name);
    auto name = reader.String(node[key_name], where);
    if (!name.ok()) return name.status();
    bool known = false;
    for (const auto& [text, value] : kVersions) {
      if (text == *name) {
        *target = value;
        known = true;
      }
    }
    if (!known) {
      return reader.Error(node[key_name], where,
                          fmt::format("unknown '{}': use one of {}", *name, Names(kVersions)));
    }
  }
  if (tls.min_version > tls.max_version) {
    return reader.Error(node, "tls_server_config.min_version", "is above max_version");
  }
  auto suites = StringList(node["cipher_suites"], reader, "tls_server_config.cipher_suites");
  if (!suites.ok()) return suites.status();
  for (size_t i = 0; i < suites->size(); ++i) {
    const std::string name = OpenSslCipher((*suites)[i]);
    if (name.empty()) {
      return reader.Error(node["cipher_suites"][i],
                          fmt::format("tls_server_config.cipher_suites[{}]", i),
                          fmt::format("unknown suite '{}': use Go's names (crypto/tls "
                                      "CipherSuites, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)",
                                      (*suites)[i]));
    }
    if (name != "-") tls.ciphers += (tls.ciphers.empty() ? "" : ":") + name;
  }
  if (node["prefer_server_cipher_suites"]) {
    const YAML::Node value = node["prefer_server_cipher_suites"];
    if (!value.IsScalar() || (value.Scalar() != "true" && value.Scalar() != "false")) {
      return reader.Error(value, "tls_server_config.prefer_server_cipher_suites",
                          "expected true or false");
    }
    tls.prefer_server_cipher_suites = value.Scalar() == "true";
  }
  auto curves =
      StringList(node["curve_preferences"], reader, "tls_server_config.curve_preferences");
  if (!curves.ok()) return curves.status();
  for (size_t i = 0; i < curves->size(); ++i) {
    std::string_view openssl;
    for (const auto& [go, name] : kCurves) {
      if (go == (*curves)[i]) openssl = name;
    }
    if (openssl.empty()) {
      return reader.Error(
          node["curve_preferences"][i], fmt::format("tls_server_config.curve_preferences[{}]", i),
          fmt::format("unknown curve '{}': use one of {}", (*curves)[i], Names(kCurves)));
    }
    tls.groups += (tls.groups.empty() ? "" : ":") + std::string(openssl);
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsServerConfig> ParseTls(const YAML::Node& node, const yaml::Reader& reader,
                                         const std::string& path, absl::Time now) {
  if (auto status = reader.ExpectMap(
          node, "tls_server_config",
          {"cert_file", "key_file", "cert", "key", "client_auth_type", "client_ca_file",
           "client_ca", "client_allowed_sans", "min_version", "max_version", "cipher_suites",
           "prefer_server_cipher_suites", "curve_preferences"});
      !status.ok()) {
    return status;
  }
  TlsServerConfig tls;
  auto cert = PemOf(node, reader, path, "cert_file", "cert", &tls.files);
  if (!cert.ok()) return cert.status();
  auto key = PemOf(node, reader, path, "key_file", "key", &tls.files);
  if (!key.ok()) return key.status();
  if (cert->empty() || key->empty()) {
    return reader.Error(node, "tls_server_config",
                        "needs cert_file (or cert) and key_file (or key)");
  }
  if (auto status = CheckPair(*cert, *key, path, now); !status.ok()) return status;
  tls.cert_pem = *cert;
  tls.key_pem = *key;
  auto ca = PemOf(node, reader, path, "client_ca_file", "client_ca", &tls.files);
  if (!ca.ok()) return ca.status();
  if (!ca->empty()) {
    auto certs = tls::ParseCertificates(*ca, path + ": tls_server_config.client_ca_file");
    if (!certs.ok()) return certs.status();
  }
  tls.client_ca_pem = *ca;
  if (node["client_auth_type"]) {
    auto name = reader.String(node["client_auth_type"], "tls_server_config.client_auth_type");
    if (!name.ok()) return name.status();
    bool known = false;
    for (const auto& [text, value] : kClientAuth) {
      if (text == *name) {
        tls.client_auth = value;
        known = true;
      }
    }
    if (!known) {
      return reader.Error(node["client_auth_type"], "tls_server_config.client_auth_type",
                          fmt::format("unknown '{}': use one of {}", *name, Names(kClientAuth)));
    }
  }
  const bool verifies = tls.client_auth == ClientAuth::kVerifyClientCertIfGiven ||
                        tls.client_auth == ClientAuth::kRequireAndVerifyClientCert;
  if (verifies && tls.client_ca_pem.empty()) {
    return reader.Error(node, "tls_server_config.client_ca_file",
                        "client_auth_type verifies client certificates: give the CA that signs "
                        "them (client_ca_file)");
  }
  if (!verifies && !tls.client_ca_pem.empty()) {
    return reader.Error(node, "tls_server_config.client_auth_type",
                        "a client CA is given, but client_auth_type does not verify client "
                        "certificates with it: use RequireAndVerifyClientCert");
  }
  auto sans =
      StringList(node["client_allowed_sans"], reader, "tls_server_config.client_allowed_sans");
  if (!sans.ok()) return sans.status();
  if (!sans->empty() && tls.client_auth != ClientAuth::kRequireAnyClientCert &&
      tls.client_auth != ClientAuth::kRequireAndVerifyClientCert) {
    return reader.Error(node["client_allowed_sans"], "tls_server_config.client_allowed_sans",
                        "needs client_auth_type RequireAndVerifyClientCert (or "
                        "RequireAnyClientCert): otherwise a client may send no certificate");
  }
  tls.client_allowed_sans = *sans;
  if (auto status = ParseProtocols(node, reader, &tls); !status.ok()) return status;
  return tls;
}

// The verify callback of client_allowed_sans: at the leaf, one of its SANs must be listed.
int VerifyAllowedSans(int preverified, X509_STORE_CTX* store) {
  if (preverified != 1 || X509_STORE_CTX_get_error_depth(store) != 0) return preverified;
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const auto* allowed =
      static_cast<const std::vector<std::string>*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  if (allowed == nullptr || allowed->empty()) return 1;
  X509* cert = X509_STORE_CTX_get_current_cert(store);
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  bool found = false;
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names) && !found; ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type != GEN_DNS && name->type != GEN_URI && name->type != GEN_EMAIL) continue;
    const std::string text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(name->d.ia5)),
                           static_cast<size_t>(ASN1_STRING_length(name->d.ia5)));
    found = std::find(allowed->begin(), allowed->end(), text) != allowed->end();
  }
  GENERAL_NAMES_free(names);
  if (!found) X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
  return found ? 1 : 0;
}

int AcceptAnyCertificate(int, X509_STORE_CTX*) { return 1; }

// htpasswd -C's highest cost: each step doubles the time a check takes, and at 18 one is about
// ten seconds on a server's core, which would hold every scrape that carries the password.
constexpr int kMaxBcryptCost = 17;

// Whether `hash` is a bcrypt hash that libxcrypt takes: $2a$, $2b$ or $2y$, a two-digit cost from
// 04 to kMaxBcryptCost, then 53 characters of bcrypt's base64. crypt(3) checks the salt at the
// lowest cost, so that loading never pays the hash's own.
absl::Status CheckBcryptHash(const std::string& hash) {
  const auto invalid = [] {
    return absl::InvalidArgumentError(
        "not a bcrypt hash ($2y$10$ and 53 more characters): make one with "
        "`htpasswd -nBC 10 \"\" | tr -d ':\\n'`");
  };
  if (hash.size() != 60 ||
      !(hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$")) ||
      !absl::ascii_isdigit(hash[4]) || !absl::ascii_isdigit(hash[5]) || hash[6] != '$') {
    return invalid();
  }
  for (char c : std::string_view(hash).substr(7)) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '/') {
      return invalid();
    }
  }
  const int cost = (hash[4] - '0') * 10 + (hash[5] - '0');
  if (cost < 4) return invalid();
  if (cost > kMaxBcryptCost) {
    return absl::InvalidArgumentError(fmt::format(
        "bcrypt cost {} is above {} (htpasswd -C's highest): every check of the password would "
        "take minutes or more; make the hash with a lower cost, e.g. `htpasswd -nBC 10 \"\"`",
        cost, kMaxBcryptCost));
  }
  const std::string cheapest = hash.substr(0, 4) + "04" + hash.substr(6);
  crypt_data data{};
  const char* checked = crypt_r("", cheapest.c_str(), &data);
  if (checked == nullptr || checked[0] == '*') return invalid();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path, absl::Time now) {
  auto text = ReadFile(path);
  if (!text.ok()) return WithContext(text.status(), "--web-config-file");
  auto document = yaml::Parse(*text, path);
  if (!document.ok()) return document.status();
  WebConfig config;
  if (document->IsNull()) return config;
  const yaml::Reader reader{path};
  if (auto status =
          reader.ExpectMap(*document, "(top level)",
                           {"tls_server_config", "http_server_config", "basic_auth_users"});
      !status.ok()) {
    return status;
  }
  if (const YAML::Node tls = (*document)["tls_server_config"]) {
    auto parsed = ParseTls(tls, reader, path, now);
    if (!parsed.ok()) return parsed.status();
    config.tls = *std::move(parsed);
  }
  if (const YAML::Node http = (*document)["http_server_config"]) {
    if (auto status = reader.ExpectMap(http, "http_server_config", {"http2", "headers"});
        !status.ok()) {
      return status;
    }
    if (const YAML::Node headers = http["headers"]) {
      if (!headers.IsMap())
        return reader.Error(headers, "http_server_config.headers", "expected a map");
      for (const auto& entry : headers) {
        const std::string name = entry.first.Scalar();
        const std::string where = "http_server_config.headers." + name;
        auto value = reader.String(entry.second, where);
        if (!value.ok()) return value.status();
        const auto* known = std::find_if(kHeaders.begin(), kHeaders.end(),
                                         [&](const auto& header) { return header.first == name; });
        if (known == kHeaders.end()) {
          return reader.Error(entry.first, where,
                              fmt::format("not a header the format sets: use {}", Names(kHeaders)));
        }
        if (!known->second.empty() && !value->empty()) {
          bool accepted = false;
          for (std::string_view allowed : Split(known->second, '|')) {
            accepted |= EqualsIgnoreCase(allowed, *value);
          }
          if (!accepted) {
            return reader.Error(entry.second, where,
                                fmt::format("'{}' is not one of {}", *value, known->second));
          }
        }
        if (value->find_first_of("\r\n") != std::string::npos) {
          return reader.Error(entry.second, where, "a header value is one line");
        }
        if (!value->empty()) config.headers[name] = *value;
      }
    }
  }
  if (const YAML::Node users = (*document)["basic_auth_users"]) {
    if (!users.IsMap()) {
      return reader.Error(users, "basic_auth_users", "expected a map of user: bcrypt hash");
    }
    for (const auto& entry : users) {
      const std::string user = entry.first.Scalar();
      const std::string where = "basic_auth_users." + user;
      auto hash = reader.String(entry.second, where);
      if (!hash.ok()) return hash.status();
      if (user.empty() || user.find(':') != std::string::npos) {
        return reader.Error(entry.first, where, "a user name is not empty and has no ':'");
      }
      if (absl::Status status = CheckBcryptHash(*hash); !status.ok()) {
        return reader.Error(entry.second, where, MessageOf(status));
      }
      config.basic_auth_users[user] = *hash;
    }
  }
  return config;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> MakeServerContext(const TlsServerConfig& config,
                                                           const std::string& path) {
  auto* allowed = new std::vector<std::string>(config.client_allowed_sans);
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), [allowed](SSL_CTX* ctx) {
    SSL_CTX_free(ctx);
    delete allowed;
  });
  const auto failed = [&](std::string_view what) {
    const unsigned long code = ERR_peek_last_error();
    const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
    ERR_clear_error();
    return absl::InvalidArgumentError(fmt::format("{}: tls_server_config: {} ({})", path, what,
                                                  reason != nullptr ? reason : "no detail"));
  };
  if (ctx == nullptr) return failed("cannot make a TLS context");
  SSL_CTX_set_app_data(ctx.get(), allowed);
  BIO* bio = BIO_new_mem_buf(config.cert_pem.data(), static_cast<int>(config.cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  const bool leaf_ok = leaf != nullptr && SSL_CTX_use_certificate(ctx.get(), leaf) == 1;
  X509_free(leaf);
  while (leaf_ok) {  // the rest of the chain
    X509* more = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (more == nullptr) break;
    if (SSL_CTX_add_extra_chain_cert(ctx.get(), more) != 1) X509_free(more);
  }
  BIO_free(bio);
  ERR_clear_error();
  if (!leaf_ok) return failed("the certificate is refused");
  bio = BIO_new_mem_buf(config.key_pem.data(), static_cast<int>(config.key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  const bool key_ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx.get(), key) == 1 &&
                      SSL_CTX_check_private_key(ctx.get()) == 1;
  EVP_PKEY_free(key);
  if (!key_ok) return failed("the key is refused");
  if (!config.client_ca_pem.empty()) {
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    bio =
        BIO_new_mem_buf(config.client_ca_pem.data(), static_cast<int>(config.client_ca_pem.size()));
    while (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(store, ca);
      sk_X509_NAME_push(names, X509_NAME_dup(X509_get_subject_name(ca)));
      X509_free(ca);
    }
    BIO_free(bio);
    ERR_clear_error();
    SSL_CTX_set_client_CA_list(ctx.get(), names);
  }
  switch (config.client_auth) {
    case ClientAuth::kNoClientCert:
      SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
      break;
    case ClientAuth::kRequestClientCert:
      SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, AcceptAnyCertificate);
      break;
    case ClientAuth::kRequireAnyClientCert:
      SSL_CTX_set_verify(
          ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
          config.client_allowed_sans.empty() ? AcceptAnyCertificate : VerifyAllowedSans);
      break;
    case ClientAuth::kVerifyClientCertIfGiven:
      SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
      break;
    case ClientAuth::kRequireAndVerifyClientCert:
      SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                         VerifyAllowedSans);
      break;
  }
  static constexpr unsigned char kSessionContext[] = "vigil";
  SSL_CTX_set_session_id_context(ctx.get(), kSessionContext, sizeof(kSessionContext) - 1);
  SSL_CTX_set_min_proto_version(ctx.get(), config.min_version);
  SSL_CTX_set_max_proto_version(ctx.get(), config.max_version);
  if (!config.ciphers.empty() && SSL_CTX_set_cipher_list(ctx.get(), config.ciphers.c_str()) != 1) {
    return failed("OpenSSL offers none of cipher_suites");
  }
  if (config.prefer_server_cipher_suites) {
    SSL_CTX_set_options(ctx.get(), SSL_OP_CIPHER_SERVER_PREFERENCE);
  }
  if (!config.groups.empty() && SSL_CTX_set1_groups_list(ctx.get(), config.groups.c_str()) != 1) {
    return failed("OpenSSL refuses curve_preferences");
  }
  return ctx;
}

bool BcryptMatches(const std::string& password, const std::string& hash) {
  crypt_data data{};
  const char* computed = crypt_r(password.c_str(), hash.c_str(), &data);
  if (computed == nullptr || computed[0] == '*') return false;
  const size_t length = std::strlen(computed);
  return length == hash.size() && CRYPTO_memcmp(computed, hash.data(), length) == 0;
}

}  // namespace vigil::webconfig
