// Checks the PEM files a TLS endpoint is given — a certificate chain, its private key, a bundle of
// CA certificates — before anything listens or dials with them, so that a missing file, a key that
// is not the certificate's, an expired certificate or a file of something else is one line naming
// the flag and the file, not a handshake that fails later with no word of why.
// Pure functions over files: thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vigil::tls {

// What messages say of a certificate: its subject and validity.
struct CertificateInfo {
  std::string subject;                 // "CN=vigil-engine,O=vigil", OpenSSL's RFC 2253 form
  std::string common_name;             // "" when the subject has none
  std::vector<std::string> alt_names;  // the subject alternative names: DNS, URI, IP, email
  absl::Time not_before;
  absl::Time not_after;
};

// The certificates of a PEM text (a chain, or a CA bundle), in order. InvalidArgument naming
// `what` when it holds none, or when a block does not parse.
absl::StatusOr<std::vector<CertificateInfo>> ParseCertificates(std::string_view pem,
                                                               std::string_view what);

// Reads and checks a certificate chain and its key: both readable, the chain's first certificate
// valid at `now`, the key the one that certificate was issued for. Returns the leaf. Errors name
// `cert_flag` / `key_flag` and the paths.
absl::StatusOr<CertificateInfo> CheckCertificateAndKey(const std::string& cert_path,
                                                       std::string_view cert_flag,
                                                       const std::string& key_path,
                                                       std::string_view key_flag, absl::Time now);

// Reads and checks a bundle of CA certificates (at least one). Returns how many it holds.
absl::StatusOr<size_t> CheckCaBundle(const std::string& path, std::string_view flag);

}  // namespace vigil::tls
