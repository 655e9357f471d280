// Implements the gRPC TLS credentials over gRPC's file-watching certificate provider.
#include "tls/credentials.h"

#include <algorithm>

#include "fmt/format.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "tls/certificates.h"

namespace vigil::tls {
namespace {

unsigned int IntervalSeconds(absl::Duration interval) {
  return static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(interval)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options, absl::Time now) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both (the key is the certificate's)");
  }
  auto leaf =
      CheckCertificateAndKey(options.cert_file, "--tls-cert", options.key_file, "--tls-key", now);
  if (!leaf.ok()) return leaf.status();
  if (!options.client_ca_file.empty()) {
    auto count = CheckCaBundle(options.client_ca_file, "--tls-client-ca");
    if (!count.ok()) return count.status();
  }
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.key_file, options.cert_file, options.client_ca_file,
      IntervalSeconds(options.reload_interval));
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (options.client_ca_file.empty()) {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options, absl::Time now) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both for mutual TLS, or neither");
  }
  if (!options.cert_file.empty()) {
    auto leaf =
        CheckCertificateAndKey(options.cert_file, "--tls-cert", options.key_file, "--tls-key", now);
    if (!leaf.ok()) return leaf.status();
  }
  if (!options.ca_file.empty()) {
    auto count = CheckCaBundle(options.ca_file, "--tls-ca");
    if (!count.ok()) return count.status();
  }
  grpc::experimental::TlsChannelCredentialsOptions tls;
  if (!options.ca_file.empty() || !options.cert_file.empty()) {
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.key_file, options.cert_file, options.ca_file,
        IntervalSeconds(options.reload_interval));
    tls.set_certificate_provider(provider);
    if (!options.ca_file.empty()) tls.watch_root_certs();
    if (!options.cert_file.empty()) tls.watch_identity_key_cert_pairs();
  }
  return grpc::experimental::TlsCredentials(tls);
}

}  // namespace vigil::tls
