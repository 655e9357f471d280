// Tests of the web config: a full file loads, each mistake is one line naming the file and the
// key, and the guard answers basic auth (401 without or with wrong credentials, /healthz open)
// and adds the configured headers.
#include <fstream>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/bcrypt.h"
#include "testing/temp_dir.h"
#include "testing/test_pki.h"
#include "webconfig/guard.h"

namespace vigil::webconfig {
namespace {

using ::testing::HasSubstr;
using vigil::testing::TempDir;
using vigil::testing::TestPki;

std::string Basic(const std::string& credentials) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < credentials.size(); i += 3) {
    const uint32_t n = (uint8_t(credentials[i]) << 16) | (uint8_t(credentials[i + 1]) << 8) |
                       uint8_t(credentials[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(n >> shift) & 63];
  }
  if (i < credentials.size()) {
    uint32_t n = uint8_t(credentials[i]) << 16;
    if (i + 1 < credentials.size()) n |= uint8_t(credentials[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < credentials.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return "Basic " + out;
}

class WebConfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }

  TempDir dir_;
  TestPki pki_{dir_.path().string(), "web"};
  TestPki::Issued server_ = pki_.Issue(
      "server", {.common_name = "exporter", .dns_names = {"localhost"}, .ip_localhost = true});
};

TEST_F(WebConfigTest, AFullFileLoads) {
  const std::string hash = testing::BcryptForTest("secret");
  const std::string path = Write("web.yml",
                                 "tls_server_config:\n"
                                 "  cert_file: server.pem\n"  // relative to the file
                                 "  key_file: " +
                                     server_.key +
                                     "\n"
                                     "  client_auth_type: RequireAndVerifyClientCert\n"
                                     "  client_ca_file: " +
                                     pki_.ca_file() +
                                     "\n"
                                     "  client_allowed_sans: [prometheus]\n"
                                     "  min_version: TLS12\n"
                                     "  max_version: TLS13\n"
                                     "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
                                     " TLS_AES_128_GCM_SHA256]\n"
                                     "  prefer_server_cipher_suites: false\n"
                                     "  curve_preferences: [CurveP256, X25519]\n"
                                     "http_server_config:\n"
                                     "  http2: false\n"
                                     "  headers:\n"
                                     "    X-Frame-Options: deny\n"
                                     "    X-Content-Type-Options: nosniff\n"
                                     "basic_auth_users:\n"
                                     "  prometheus: '" +
                                     hash + "'\n");
  auto config = LoadWebConfig(path, absl::Now());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->tls.has_value());
  EXPECT_EQ(config->tls->client_auth, ClientAuth::kRequireAndVerifyClientCert);
  EXPECT_EQ(config->tls->ciphers, "ECDHE-ECDSA-AES128-GCM-SHA256");
  EXPECT_EQ(config->tls->groups, "P-256:X25519");
  EXPECT_FALSE(config->tls->prefer_server_cipher_suites);
  EXPECT_EQ(config->headers.size(), 2u);
  EXPECT_TRUE(MakeServerContext(*config->tls, path).ok());
  EXPECT_TRUE(BcryptMatches("secret", hash));
  EXPECT_FALSE(BcryptMatches("Secret", hash));
}

TEST_F(WebConfigTest, EachMistakeIsOneLineNamingTheFileAndTheKey) {
  const TestPki::Issued other = pki_.Issue("other", {.common_name = "other"});
  const std::string tls =
      "tls_server_config:\n  cert_file: " + server_.cert + "\n  key_file: " + server_.key + "\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nope: 1\n", "unknown key 'nope'"},
      {"tls_server_config:\n  cert_file: " + dir_.File("missing.pem") +
           "\n  key_file: " + server_.key + "\n",
       "tls_server_config.cert_file: cannot read"},
      {"tls_server_config:\n  cert_file: " + server_.cert + "\n  key_file: " + other.key + "\n",
       "tls_server_config.key_file is not the key of the certificate CN=exporter"},
      {"tls_server_config:\n  key_file: " + server_.key + "\n",
       "needs cert_file (or cert) and key_file (or key)"},
      {tls + "  client_auth_type: Sometimes\n", "unknown 'Sometimes': use one of NoClientCert"},
      {tls + "  client_auth_type: RequireAndVerifyClientCert\n", "give the CA that signs them"},
      {tls + "  client_ca_file: " + pki_.ca_file() + "\n", "use RequireAndVerifyClientCert"},
      {tls + "  min_version: TLS14\n", "unknown 'TLS14'"},
      {tls + "  min_version: TLS13\n  max_version: TLS12\n", "is above max_version"},
      {tls + "  cipher_suites: [TLS_FANCY]\n", "unknown suite 'TLS_FANCY'"},
      {tls + "  curve_preferences: [CurveP999]\n", "unknown curve 'CurveP999'"},
      {tls + "  client_allowed_sans: [x]\n", "needs client_auth_type RequireAndVerifyClientCert"},
      {"http_server_config:\n  headers:\n    X-Powered-By: vigil\n",
       "not a header the format sets"},
      {"http_server_config:\n  headers:\n    X-Frame-Options: always\n", "'always' is not one of"},
      {"basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice: not a bcrypt hash"},
      {"basic_auth_users:\n  alice: '$2y$10$short'\n", "not a bcrypt hash"},
      // A cost no login could wait for is refused at once, without computing it.
      {"basic_auth_users:\n  alice: '$2y$30$" + std::string(53, 'a') + "'\n",
       "bcrypt cost 30 is above 17"},
      {"basic_auth_users:\n  alice: '$2y$03$" + std::string(53, 'a') + "'\n", "not a bcrypt hash"},
      {"basic_auth_users:\n  alice: '$2y$10$" + std::string(52, 'a') + "!'\n", "not a bcrypt hash"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = Write("bad.yml", cases[i].first);
    auto config = LoadWebConfig(path, absl::Now());
    ASSERT_FALSE(config.ok()) << cases[i].second;
    const std::string message(config.status().message());
    EXPECT_THAT(message, HasSubstr(cases[i].second)) << cases[i].first;
    EXPECT_THAT(message, HasSubstr(path)) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(WebConfigTest, TheGuardAsksForBasicAuthButNotOnHealthz) {
  const std::string path = Write("web.yml", "basic_auth_users:\n  prometheus: '" +
                                                testing::BcryptForTest("s3cret:with colon") +
                                                "'\nhttp_server_config:\n  headers:\n"
                                                "    X-Content-Type-Options: nosniff\n");
  auto guard = WebConfigGuard::Load(path, Clock::Real());
  ASSERT_TRUE(guard.ok()) << guard.status();
  EXPECT_EQ((*guard)->TlsContext(), nullptr);
  EXPECT_EQ((*guard)->ExtraHeaders(), "X-Content-Type-Options: nosniff\r\n");
  const auto check = [&](const std::string& path, const std::string& authorization) {
    std::optional<HttpResponse> refused =
        (*guard)->Check({.path = path, .authorization = authorization});
    return refused.has_value() ? refused->status : 200;
  };
  EXPECT_EQ(check("/metrics", ""), 401);
  EXPECT_EQ(check("/metrics", Basic("prometheus:wrong")), 401);
  EXPECT_EQ(check("/metrics", Basic("nobody:s3cret:with colon")), 401);
  EXPECT_EQ(check("/metrics", "Bearer abc"), 401);
  EXPECT_EQ(check("/metrics", Basic("prometheus:s3cret:with colon")), 200);
  EXPECT_EQ(check("/metrics", Basic("prometheus:s3cret:with colon")), 200);  // remembered
  EXPECT_EQ(check("/healthz", ""), 200);
  EXPECT_THAT((*guard)->Check({.path = "/metrics"})->extra_headers,
              HasSubstr("WWW-Authenticate: Basic"));
}

}  // namespace
}  // namespace vigil::webconfig
