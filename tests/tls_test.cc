// End-to-end tests of TLS on the engine's TCP port with the real binary and certificates from a
// test CA: mutual TLS lets a granted client certificate inject and the audit trail names it; a
// certificate without the grant, a client without a certificate, and one that trusts another CA
// are refused; the token is refused over plain TCP with the line that says how to enable TLS and
// accepted over TLS; a certificate rotated on disk serves new connections while the exporter's
// open stream goes on; each bad TLS flag or file is one line and exit 2.
#include <fstream>
#include <string>
#include <vector>

#include "daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"
#include "testing/test_pki.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

std::string WriteFile(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.File(name);
  std::ofstream(path) << text;
  return path;
}

// A CA, the engine's certificate (for localhost and 127.0.0.1) and two client certificates:
// "ops" (a SPIFFE id, granted read and inject) and "dashboards" (granted read).
class TlsTest : public ::testing::Test {
 protected:
  TlsTest()
      : engine_cert_(pki_.Issue("engine", {.common_name = "vigil-engine",
                                           .dns_names = {"localhost", "vigil-engine.vigil.svc"},
                                           .ip_localhost = true})),
        ops_(pki_.Issue("ops", {.common_name = "ops", .uris = {"spiffe://test/ns/vigil/sa/ops"}})),
        dashboards_(pki_.Issue("dashboards", {.common_name = "dashboards"})) {}

  std::vector<std::string> EngineTls(bool mutual) const {
    std::vector<std::string> args = {"--tls-cert", engine_cert_.cert, "--tls-key",
                                     engine_cert_.key};
    if (mutual) args.insert(args.end(), {"--tls-client-ca", pki_.ca_file()});
    return args;
  }

  static std::vector<std::string> ClientTls(const std::string& ca, const TestPki::Issued* cert) {
    std::vector<std::string> args = {"--tls-ca", ca};
    if (cert != nullptr)
      args.insert(args.end(), {"--tls-cert", cert->cert, "--tls-key", cert->key});
    return args;
  }

  static std::vector<std::string> Concat(std::vector<std::string> a,
                                         const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  TempDir dir_;
  TestPki pki_{dir_.path().string(), "vigil"};
  TestPki::Issued engine_cert_;
  TestPki::Issued ops_;
  TestPki::Issued dashboards_;
};

TEST_F(TlsTest, MutualTlsLetsAGrantedCertificateInjectAndTheAuditNamesIt) {
  const std::string config =
      WriteFile(dir_, "engine.yaml",
                "tls_clients:\n"
                "  - {identity: spiffe://test/ns/vigil/sa/ops, may: [read, inject]}\n"
                "  - {identity: dashboards, may: [read]}\n");
  EngineProcess engine(dir_.path().string(), "n1", 2,
                       Concat(EngineTls(/*mutual=*/true), {"--config", config}));
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  EXPECT_THAT(engine.process->Stderr(), HasSubstr("(mutual TLS)"));
  const std::string address = "tls://" + engine.tcp_address;
  const std::vector<std::string> inject = {"inject", "xid", "--gpu",    "0",
                                           "--xid",  "79",  "--engine", address};

  auto injected = Vigil(Concat(inject, ClientTls(pki_.ca_file(), &ops_)));
  ASSERT_EQ(injected.exit_code, 0) << injected.err << engine.process->Stderr();
  std::string who;
  for (const Json& event :
       JsonLines(Vigil({"events", "--json", "--no-follow", "--engine", engine.unix_address}).out)) {
    if (event["kind"] == "XID") who = event["who"];
  }
  EXPECT_THAT(who, HasSubstr("certificate spiffe://test/ns/vigil/sa/ops from ipv4:127.0.0.1:"));

  // Granted read only: reads work, injection is refused with what to grant.
  auto read = Vigil(
      Concat({"health", "--json", "--engine", address}, ClientTls(pki_.ca_file(), &dashboards_)));
  EXPECT_NE(read.exit_code, 2) << read.err;
  EXPECT_THAT(read.out, HasSubstr("\"gpus\""));
  auto refused = Vigil(Concat(inject, ClientTls(pki_.ca_file(), &dashboards_)));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("the client certificate dashboards may not inject"));

  // A certificate the CA signed but tls_clients does not list may not even read.
  const TestPki::Issued stranger = pki_.Issue("stranger", {.common_name = "stranger"});
  auto unlisted =
      Vigil(Concat({"health", "--engine", address}, ClientTls(pki_.ca_file(), &stranger)));
  EXPECT_EQ(unlisted.exit_code, 2) << unlisted.out;
  EXPECT_THAT(unlisted.err, HasSubstr("the client certificate stranger may not read"));
  EXPECT_TRUE(engine.process->WaitForStderr("refused reads from"));

  // No client certificate: the handshake fails, nothing is injected.
  auto anonymous = Vigil(Concat(inject, ClientTls(pki_.ca_file(), nullptr)));
  EXPECT_NE(anonymous.exit_code, 0);
  EXPECT_THAT(anonymous.err, Not(HasSubstr("inj-")));
  EXPECT_THAT(anonymous.err, HasSubstr("ended the TLS handshake: does it require a client "
                                       "certificate"));
  EXPECT_TRUE(engine.process->WaitForStderr("peer did not return a certificate"));
  // Plain TCP to the TLS port: no answer either.
  auto plain = Vigil({"health", "--engine", engine.tcp_address, "--timeout", "2s"});
  EXPECT_NE(plain.exit_code, 0);
  const Json list = VigilJson({"inject", "list", "--json", "--engine", engine.unix_address});
  EXPECT_TRUE(list["injections"].empty()) << list.dump();  // the XID left nothing active
}

TEST_F(TlsTest, TheTokenIsRefusedOverPlainTcpAndAcceptedOverTls) {
  const std::string token = WriteFile(dir_, "token", "0123456789abcdef0123456789abcdef\n");
  std::vector<std::string> inject = {"inject",  "field", "--gpu",        "0",  "--field", "150",
                                     "--value", "95",    "--token-file", token};
  {
    EngineProcess plain(dir_.path().string(), "plain", 1, {"--inject-token-file", token});
    ASSERT_FALSE(plain.tcp_address.empty()) << plain.process->Stderr();
    EXPECT_THAT(plain.process->Stderr(), HasSubstr("--inject-token-file without TLS"));
    auto refused = Vigil(Concat(inject, {"--engine", plain.tcp_address}));
    EXPECT_EQ(refused.exit_code, 2);
    EXPECT_THAT(refused.err, HasSubstr("the injection token is refused over plain TCP"));
    EXPECT_THAT(refused.err, HasSubstr("start the engine with --tls-cert and --tls-key"));
  }
  {
    EngineProcess opted(dir_.path().string(), "opted", 1,
                        {"--inject-token-file", token, "--insecure-token-over-plaintext"});
    ASSERT_FALSE(opted.tcp_address.empty()) << opted.process->Stderr();
    auto allowed = Vigil(Concat(inject, {"--engine", opted.tcp_address}));
    EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
    EXPECT_THAT(allowed.out, HasSubstr("by token from ipv4:127.0.0.1:"));
  }
  EngineProcess secure(dir_.path().string(), "secure", 1,
                       Concat(EngineTls(/*mutual=*/false), {"--inject-token-file", token}));
  ASSERT_FALSE(secure.tcp_address.empty()) << secure.process->Stderr();
  auto over_tls = Vigil(Concat(Concat(inject, {"--engine", "tls://" + secure.tcp_address}),
                               ClientTls(pki_.ca_file(), nullptr)));
  EXPECT_EQ(over_tls.exit_code, 0) << over_tls.err;
  // The server's name checked: the engine's certificate does not carry "elsewhere".
  auto wrong_name = Vigil(Concat(
      Concat(inject, {"--engine", "tls://" + secure.tcp_address, "--tls-server-name", "elsewhere"}),
      ClientTls(pki_.ca_file(), nullptr)));
  EXPECT_NE(wrong_name.exit_code, 0);
  // A client that trusts another CA refuses the engine's certificate.
  TempDir other_dir;
  TestPki other(other_dir.path().string(), "other");
  auto wrong_ca = Vigil(Concat(Concat(inject, {"--engine", "tls://" + secure.tcp_address}),
                               ClientTls(other.ca_file(), nullptr)));
  EXPECT_NE(wrong_ca.exit_code, 0);
  EXPECT_THAT(wrong_ca.err, HasSubstr("is not signed by a CA this client trusts"));
  EXPECT_THAT(wrong_name.err, HasSubstr("does not name the host dialled"));
}

// The subject of the certificate the TLS server at `address` presents to a new connection
// (openssl s_client), "" when none.
std::string ServedSubject(const std::string& address) {
  return Shell("openssl s_client -connect " + address +
               " </dev/null 2>/dev/null | openssl x509 -noout -subject")
      .out;
}

TEST_F(TlsTest, ARotatedCertificateServesNewConnectionsAndTheOpenStreamSurvives) {
  EngineProcess engine(dir_.path().string(), "n1", 2,
                       Concat(EngineTls(/*mutual=*/false), {"--tls-reload-interval", "1s"}));
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  HttpDaemon exporter("exporter", dir_.path().string(), "tls://" + engine.tcp_address,
                      {"--tls-ca", pki_.ca_file()});
  ASSERT_NE(exporter.port(), 0) << exporter.process().Stderr();
  std::string scrape = exporter.GetUntil("/metrics", [](const std::string& body) {
    return SeriesValue(body, "vigil_engine_up") == 1;
  });
  ASSERT_EQ(SeriesValue(scrape, "vigil_engine_up"), 1) << scrape << exporter.process().Stderr();
  const double seq_before = SeriesValue(scrape, "vigil_engine_seq");
  EXPECT_THAT(ServedSubject(engine.tcp_address), HasSubstr("CN = vigil-engine\n"));

  // cert-manager's way: new files in place (the key, then the certificate).
  pki_.Issue(
      "engine",
      {.common_name = "vigil-engine-rotated", .dns_names = {"localhost"}, .ip_localhost = true});
  std::string served;
  ASSERT_TRUE(Eventually([&] {
    served = ServedSubject(engine.tcp_address);
    return served.find("CN = vigil-engine-rotated") != std::string::npos;
  })) << served
      << engine.process->Stderr();
  auto fresh = Vigil(
      {"health", "--json", "--engine", "tls://" + engine.tcp_address, "--tls-ca", pki_.ca_file()});
  EXPECT_THAT(fresh.out, HasSubstr("\"gpus\"")) << fresh.err;

  // The exporter's stream, opened before, goes on: newer ticks, never a reconnect.
  scrape = exporter.GetUntil("/metrics", [&](const std::string& body) {
    return SeriesValue(body, "vigil_engine_seq") > seq_before + 2;
  });
  EXPECT_GT(SeriesValue(scrape, "vigil_engine_seq"), seq_before + 2) << scrape;
  EXPECT_EQ(SeriesValue(scrape, "vigil_engine_up"), 1);
  EXPECT_EQ(SeriesValue(scrape, "vigil_exporter_engine_reconnects_total"), 0) << scrape;
}

TEST_F(TlsTest, EachBadTlsFlagOrFileIsOneLineAndExit2) {
  const std::string garbage = WriteFile(dir_, "garbage.pem", "not a certificate\n");
  const std::string config =
      WriteFile(dir_, "grants.yaml", "tls_clients:\n  - {identity: ops, may: [read]}\n");
  const std::string bad_grant =
      WriteFile(dir_, "bad-grant.yaml", "tls_clients:\n  - {identity: ops, may: [everything]}\n");
  const std::vector<std::string> engine = {"engine",      "--backend",         "sim",
                                           "--socket",    dir_.File("e.sock"), "--listen",
                                           "127.0.0.1:0", "--state-dir",       dir_.File("state")};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {Concat(engine, {"--tls-cert", dir_.File("missing.pem"), "--tls-key", engine_cert_.key}),
       "--tls-cert: cannot read"},
      {Concat(engine, {"--tls-cert", engine_cert_.cert, "--tls-key", ops_.key}),
       "is not the key of the certificate CN=vigil-engine"},
      {Concat(engine, {"--tls-cert", garbage, "--tls-key", engine_cert_.key}),
       "no PEM certificate in it"},
      {Concat(engine, {"--tls-key", engine_cert_.key}),
       "--tls-key and --tls-client-ca need --tls-cert"},
      {Concat(engine, {"--tls-cert", engine_cert_.cert}), "--tls-cert needs --tls-key"},
      {Concat(engine, Concat(EngineTls(false), {"--tls-client-ca", garbage})),
       "--tls-client-ca " + garbage + ": no PEM certificate"},
      {Concat(engine, Concat(EngineTls(false), {"--config", config})),
       "tls_clients grants client certificates, which the engine asks for only with "
       "--tls-client-ca"},
      {Concat(engine, Concat(EngineTls(true), {"--config", bad_grant})),
       "unknown permission 'everything'"},
      {Concat(engine, Concat(EngineTls(false), {"--insecure-token-over-plaintext"})),
       "drop the flag"},
      {{"health", "--engine", "tls://127.0.0.1:1", "--tls-ca", garbage}, "--tls-ca " + garbage},
      {{"health", "--engine", "tls://127.0.0.1:1", "--tls-cert", ops_.cert},
       "--tls-cert and --tls-key go together"},
      {{"health", "--engine", dir_.File("e.sock"), "--tls-ca", pki_.ca_file()},
       "not its Unix socket"},
  };
  for (const auto& [args, expected] : cases) {
    auto result = Vigil(args);
    EXPECT_EQ(result.exit_code, 2) << expected << "\n" << result.err;
    EXPECT_THAT(result.err, HasSubstr(expected));
  }
}

}  // namespace
}  // namespace vigil::testing
