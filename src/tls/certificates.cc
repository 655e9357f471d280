// Implements the checks of PEM certificate and key files with OpenSSL.
#include "tls/certificates.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"

namespace vigil::tls {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio MemoryBio(std::string_view text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// OpenSSL's last error as text, and the queue cleared.
std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "no detail";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::Time ToTime(const ASN1_TIME* time) {
  tm parts{};
  if (time == nullptr || ASN1_TIME_to_tm(time, &parts) != 1) return absl::InfinitePast();
  return absl::FromUnixSeconds(timegm(&parts));
}

std::string NameText(const X509_NAME* name) {
  Bio out(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(out.get(), name, 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out.get(), &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

CertificateInfo Describe(X509* cert) {
  CertificateInfo info;
  const X509_NAME* subject = X509_get_subject_name(cert);
  info.subject = NameText(subject);
  char common_name[256] = {};
  if (X509_NAME_get_text_by_NID(const_cast<X509_NAME*>(subject), NID_commonName, common_name,
                                sizeof(common_name)) > 0) {
    info.common_name = common_name;
  }
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type == GEN_DNS || name->type == GEN_URI || name->type == GEN_EMAIL) {
      const ASN1_IA5STRING* text = name->d.ia5;
      info.alt_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                                  static_cast<size_t>(ASN1_STRING_length(text)));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = name->d.iPAddress;
      const unsigned char* bytes = ASN1_STRING_get0_data(ip);
      if (ASN1_STRING_length(ip) == 4) {
        info.alt_names.push_back(
            fmt::format("{}.{}.{}.{}", bytes[0], bytes[1], bytes[2], bytes[3]));
      }
    }
  }
  GENERAL_NAMES_free(names);
  info.not_before = ToTime(X509_get0_notBefore(cert));
  info.not_after = ToTime(X509_get0_notAfter(cert));
  return info;
}

std::string Named(const CertificateInfo& info) {
  return info.subject.empty() ? "the certificate" : "the certificate " + info.subject;
}

absl::StatusOr<std::vector<Certificate>> ReadCertificates(std::string_view pem,
                                                          std::string_view what) {
  std::vector<Certificate> certs;
  Bio bio = MemoryBio(pem);
  while (true) {
    Certificate cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    certs.push_back(std::move(cert));
  }
  const unsigned long code = ERR_peek_last_error();
  // The loop ends on "no start line" past the last block; anything else is a broken block.
  const bool clean_end = code == 0 || (ERR_GET_LIB(code) == ERR_LIB_PEM &&
                                       ERR_GET_REASON(code) == PEM_R_NO_START_LINE);
  const std::string detail = OpenSslError();
  if (!clean_end) {
    return absl::InvalidArgumentError(
        fmt::format("{}: a certificate in it does not parse ({})", what, detail));
  }
  if (certs.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: no PEM certificate in it (expected a -----BEGIN CERTIFICATE----- block)", what));
  }
  return certs;
}

}  // namespace

absl::StatusOr<std::vector<CertificateInfo>> ParseCertificates(std::string_view pem,
                                                               std::string_view what) {
  auto certs = ReadCertificates(pem, what);
  if (!certs.ok()) return certs.status();
  std::vector<CertificateInfo> infos;
  for (const Certificate& cert : *certs) infos.push_back(Describe(cert.get()));
  return infos;
}

absl::StatusOr<CertificateInfo> CheckCertificateAndKey(const std::string& cert_path,
                                                       std::string_view cert_flag,
                                                       const std::string& key_path,
                                                       std::string_view key_flag, absl::Time now) {
  auto cert_text = ReadFile(cert_path);
  if (!cert_text.ok()) return WithContext(cert_text.status(), cert_flag);
  const std::string cert_what = fmt::format("{} {}", cert_flag, cert_path);
  auto certs = ReadCertificates(*cert_text, cert_what);
  if (!certs.ok()) return certs.status();
  X509* leaf = certs->front().get();
  const CertificateInfo info = Describe(leaf);
  if (now > info.not_after) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: {} expired at {}: renew it", cert_what, Named(info),
        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", info.not_after, absl::UTCTimeZone())));
  }
  if (now < info.not_before) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: {} is not valid before {}: is this machine's clock right?", cert_what, Named(info),
        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", info.not_before, absl::UTCTimeZone())));
  }
  auto key_text = ReadFile(key_path);
  if (!key_text.ok()) return WithContext(key_text.status(), key_flag);
  Bio key_bio = MemoryBio(*key_text);
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    const std::string detail = OpenSslError();
    return absl::InvalidArgumentError(fmt::format(
        "{} {}: no unencrypted PEM private key in it (expected a -----BEGIN PRIVATE KEY----- "
        "block; {})",
        key_flag, key_path, detail));
  }
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(fmt::format(
        "{} {} is not the key of {} in {} {}: give the key the certificate was issued for",
        key_flag, key_path, Named(info), cert_flag, cert_path));
  }
  return info;
}

absl::StatusOr<size_t> CheckCaBundle(const std::string& path, std::string_view flag) {
  auto text = ReadFile(path);
  if (!text.ok()) return WithContext(text.status(), flag);
  auto certs = ReadCertificates(*text, fmt::format("{} {}", flag, path));
  if (!certs.ok()) return certs.status();
  return certs->size();
}

}  // namespace vigil::tls
