// Tests of the TLS file checks with certificates made by a test CA: each mistake is one line that
// names the flag and the file.
#include "tls/certificates.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"
#include "testing/test_pki.h"

namespace vigil::tls {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using vigil::testing::TempDir;
using vigil::testing::TestPki;

class CertificatesTest : public ::testing::Test {
 protected:
  std::string Message(const absl::Status& status) { return std::string(status.message()); }

  TempDir dir_;
  TestPki pki_{dir_.path().string(), "test"};
};

TEST_F(CertificatesTest, AGoodPairIsDescribedWithItsNames) {
  const auto issued =
      pki_.Issue("engine", {.common_name = "vigil-engine",
                            .dns_names = {"vigil-engine.vigil.svc"},
                            .uris = {"spiffe://cluster.local/ns/vigil/sa/vigil-engine"}});
  auto info =
      CheckCertificateAndKey(issued.cert, "--tls-cert", issued.key, "--tls-key", absl::Now());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->common_name, "vigil-engine");
  EXPECT_EQ(info->subject, "CN=vigil-engine,O=vigil tests");
  EXPECT_THAT(info->alt_names, ElementsAre("vigil-engine.vigil.svc",
                                           "spiffe://cluster.local/ns/vigil/sa/vigil-engine"));
  EXPECT_EQ(CheckCaBundle(pki_.ca_file(), "--tls-ca").value_or(0), 1u);
}

TEST_F(CertificatesTest, EachMistakeIsOneLineNamingTheFlagAndTheFile) {
  const auto good = pki_.Issue("good", {.common_name = "good"});
  const auto other = pki_.Issue("other", {.common_name = "other"});
  const auto expired = pki_.Issue(
      "expired",
      {.common_name = "old", .valid_from = absl::Hours(-48), .valid_for = absl::Hours(24)});
  const auto early = pki_.Issue("early", {.common_name = "early", .valid_from = absl::Hours(2)});
  const std::string garbage = dir_.File("garbage.pem");
  std::ofstream(garbage) << "not a certificate\n";
  const std::string broken = dir_.File("broken.pem");
  std::ofstream(broken) << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  const absl::Time now = absl::Now();
  const auto check = [&](const std::string& cert, const std::string& key) {
    return CheckCertificateAndKey(cert, "--tls-cert", key, "--tls-key", now).status();
  };
  struct Case {
    absl::Status status;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {check(dir_.File("missing.pem"), good.key), "--tls-cert: cannot read"},
      {check(good.cert, dir_.File("missing-key.pem")), "--tls-key: cannot read"},
      {check(garbage, good.key), "--tls-cert " + garbage + ": no PEM certificate in it"},
      {check(broken, good.key), "--tls-cert " + broken + ": a certificate in it does not parse"},
      {check(good.cert, garbage), "--tls-key " + garbage + ": no unencrypted PEM private key"},
      {check(good.cert, other.key),
       "--tls-key " + other.key +
           " is not the key of the certificate CN=good,O=vigil tests in "
           "--tls-cert " +
           good.cert},
      {check(expired.cert, expired.key), "the certificate CN=old,O=vigil tests expired at"},
      {check(early.cert, early.key), "is not valid before"},
      {CheckCaBundle(garbage, "--tls-ca").status(), "--tls-ca " + garbage + ": no PEM certificate"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.expected;
    EXPECT_THAT(Message(c.status), HasSubstr(c.expected));
    EXPECT_EQ(Message(c.status).find('\n'), std::string::npos) << Message(c.status);
  }
}

}  // namespace
}  // namespace vigil::tls
