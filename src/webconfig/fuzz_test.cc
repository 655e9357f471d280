// Fuzz target of the web config (testing/fuzz.h): a full file and smaller ones, naming a real
// certificate, key and CA, mutated, and random text in the format's alphabet. For any input,
// LoadWebConfig gives a config whose TLS part OpenSSL takes or refuses with one line, or it
// refuses the file with one printable line that names the file — never a crash (ASan in
// `make fuzz`), never a config without a certificate where TLS is on.
#include "testing/fuzz.h"

#include <fstream>

#include "gtest/gtest.h"
#include "testing/bcrypt.h"
#include "testing/temp_dir.h"
#include "testing/test_pki.h"
#include "webconfig/web_config.h"

namespace vigil::webconfig {
namespace {

void ExpectOneCleanLine(const absl::Status& status, const std::string& path,
                        const std::string& input) {
  const std::string message(status.message());
  EXPECT_NE(message.find(path), std::string::npos) << message << "\n" << input;
  for (char c : message) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f)
        << "byte " << int(static_cast<unsigned char>(c)) << " in " << message;
  }
}

TEST(WebConfigFuzzTest, AFileLoadsIntoAContextOrIsRefusedWithOneLine) {
  testing::TempDir dir;
  testing::TestPki pki(dir.path().string(), "fuzz");
  const testing::TestPki::Issued server =
      pki.Issue("server", {.common_name = "exporter", .dns_names = {"localhost"}});
  const std::string tls =
      "tls_server_config:\n  cert_file: " + server.cert + "\n  key_file: " + server.key + "\n";
  const std::vector<std::string> seeds = {
      tls + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: " + pki.ca_file() +
          "\n  client_allowed_sans: [prometheus, 'spiffe://x/y']\n  min_version: TLS12\n"
          "  max_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"
          "  prefer_server_cipher_suites: false\n  curve_preferences: [CurveP256, X25519]\n",
      tls + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: " + pki.ca_file() +
          "\n",
      "http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\n"
      "    Strict-Transport-Security: max-age=31536000\n    X-Content-Type-Options: nosniff\n",
      "basic_auth_users:\n  prometheus: '" + testing::BcryptForTest("s3cret") + "'\n  alice: x\n",
      tls + "basic_auth_users:\n  bob: '$2y$10$abcdefghijklmnopqrstuv'\n",
      "tls_server_config: {cert: 'x', key: |\n  multi\n  line\n}\n",
      "",
      "[1, 2, {a: b}]\n",
  };
  const std::string path = dir.File("web.yml");
  testing::Fuzz(
      "web config", seeds,
      "tls_server_config:cert_filekey_fileclient_auth_typeRequireAndVerifyClientCert"
      "min_versionTLS1213cipher_suitescurve_preferenceshttp_server_configheadersbasic_auth_users"
      " \n-[]{},'\"|$2y",
      2'000, [&](const std::string& input) -> bool {
        std::ofstream(path, std::ios::trunc) << input;
        auto config = LoadWebConfig(path, absl::Now());
        if (!config.ok()) {
          ExpectOneCleanLine(config.status(), path, input);
          return false;
        }
        if (config->tls.has_value()) {
          EXPECT_FALSE(config->tls->cert_pem.empty()) << input;
          EXPECT_FALSE(config->tls->key_pem.empty()) << input;
          auto context = MakeServerContext(*config->tls, path);
          if (!context.ok()) ExpectOneCleanLine(context.status(), path, input);
        }
        for (const auto& [user, hash] : config->basic_auth_users) {
          EXPECT_TRUE(hash.starts_with("$2")) << user << ": " << hash;
        }
        return true;
      });
}

}  // namespace
}  // namespace vigil::webconfig
