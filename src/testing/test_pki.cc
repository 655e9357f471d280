// Implements the tests' certificate authority with OpenSSL's X509 API.
#include "testing/test_pki.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>

#include "common/check.h"
#include "common/env.h"

namespace vigil::testing {

struct TestPki::State {
  EVP_PKEY* ca_key = nullptr;
  X509* ca_cert = nullptr;
  long serial = 1;
  ~State() {
    X509_free(ca_cert);
    EVP_PKEY_free(ca_key);
  }
};

namespace {

// A failure here is a broken test set-up, not a case to handle.
void Check(bool ok, const char* what) {
  if (!ok) fprintf(stderr, "TestPki: %s failed\n", what);
  VIGIL_CHECK(ok);
}

EVP_PKEY* NewKey() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  Check(key != nullptr, "EVP_EC_gen");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str());
  Check(extension != nullptr, "X509V3_EXT_conf_nid");
  X509_add_ext(cert, extension, -1);
  X509_EXTENSION_free(extension);
}

X509* NewCertificate(EVP_PKEY* key, const std::string& common_name, long serial,
                     absl::Duration valid_from, absl::Duration valid_for) {
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  const long from = static_cast<long>(absl::ToInt64Seconds(valid_from));
  X509_gmtime_adj(X509_getm_notBefore(cert), from);
  X509_gmtime_adj(X509_getm_notAfter(cert),
                  from + static_cast<long>(absl::ToInt64Seconds(valid_for)));
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("vigil tests"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  return cert;
}

std::string Pem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string text(data, static_cast<size_t>(size));
  BIO_free(bio);
  return text;
}

std::string Pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string text(data, static_cast<size_t>(size));
  BIO_free(bio);
  return text;
}

void Write(const std::string& path, const std::string& text) {
  Check(WriteFileAtomically(Env::Default(), path, text).ok(), "writing a PEM file");
}

}  // namespace

TestPki::TestPki(std::string dir, std::string name)
    : state_(std::make_unique<State>()), dir_(std::move(dir)) {
  state_->ca_key = NewKey();
  state_->ca_cert = NewCertificate(state_->ca_key, name + " CA", state_->serial++, absl::Hours(-1),
                                   absl::Hours(24 * 30));
  X509_set_issuer_name(state_->ca_cert, X509_get_subject_name(state_->ca_cert));
  AddExtension(state_->ca_cert, state_->ca_cert, NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(state_->ca_cert, state_->ca_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(state_->ca_cert, state_->ca_cert, NID_subject_key_identifier, "hash");
  Check(X509_sign(state_->ca_cert, state_->ca_key, EVP_sha256()) > 0, "signing the CA");
  ca_file_ = dir_ + "/" + name + "-ca.pem";
  Write(ca_file_, Pem(state_->ca_cert));
}

TestPki::~TestPki() = default;

TestPki::Issued TestPki::Issue(const std::string& file_stem, const Request& request) {
  EVP_PKEY* key = NewKey();
  X509* cert = NewCertificate(key, request.common_name, state_->serial++, request.valid_from,
                              request.valid_for);
  X509_set_issuer_name(cert, X509_get_subject_name(state_->ca_cert));
  AddExtension(cert, state_->ca_cert, NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(cert, state_->ca_cert, NID_key_usage, "critical,digitalSignature,keyEncipherment");
  AddExtension(cert, state_->ca_cert, NID_ext_key_usage, "serverAuth,clientAuth");
  AddExtension(cert, state_->ca_cert, NID_authority_key_identifier, "keyid:always");
  std::string names;
  for (const std::string& dns : request.dns_names)
    names += (names.empty() ? "" : ",") + ("DNS:" + dns);
  for (const std::string& uri : request.uris) names += (names.empty() ? "" : ",") + ("URI:" + uri);
  if (request.ip_localhost) names += std::string(names.empty() ? "" : ",") + "IP:127.0.0.1";
  if (!names.empty()) AddExtension(cert, state_->ca_cert, NID_subject_alt_name, names);
  Check(X509_sign(cert, state_->ca_key, EVP_sha256()) > 0, "signing a certificate");
  Issued issued{.cert = dir_ + "/" + file_stem + ".pem",
                .key = dir_ + "/" + file_stem + "-key.pem"};
  Write(issued.key, Pem(key));
  Write(issued.cert, Pem(cert));
  X509_free(cert);
  EVP_PKEY_free(key);
  return issued;
}

}  // namespace vigil::testing
