// Implements the reading of a call's peer certificate from gRPC's auth context.
#include "tls/peer.h"

#include <algorithm>

#include "grpc/grpc_security_constants.h"

namespace vigil::tls {
namespace {

std::vector<std::string> Values(const grpc::AuthContext& context, const char* name) {
  std::vector<std::string> values;
  for (const grpc::string_ref& value : context.FindPropertyValues(name)) {
    values.emplace_back(value.data(), value.size());
  }
  return values;
}

}  // namespace

std::string PeerCertificate::Identity() const {
  for (const std::string& name : alt_names) {
    if (name.find("://") != std::string::npos) return name;
  }
  if (!alt_names.empty()) return alt_names.front();
  if (!common_name.empty()) return common_name;
  return subject;
}

bool PeerCertificate::Names(const std::string& identity) const {
  if (identity.empty()) return false;
  return identity == common_name || identity == subject ||
         std::find(alt_names.begin(), alt_names.end(), identity) != alt_names.end();
}

bool IsTls(const grpc::AuthContext& context) {
  const std::vector<std::string> types =
      Values(context, GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  // "ssl" from gRPC's SslServerCredentials, "tls" from its TlsServerCredentials (ours).
  return std::any_of(types.begin(), types.end(), [](const std::string& type) {
    return type == GRPC_SSL_TRANSPORT_SECURITY_TYPE || type == "tls";
  });
}

std::optional<PeerCertificate> PeerCertificateOf(const grpc::AuthContext& context) {
  if (!IsTls(context) || !context.IsPeerAuthenticated()) return std::nullopt;
  PeerCertificate cert;
  const std::vector<std::string> subjects = Values(context, GRPC_X509_SUBJECT_PROPERTY_NAME);
  const std::vector<std::string> names = Values(context, GRPC_X509_CN_PROPERTY_NAME);
  if (!subjects.empty()) cert.subject = subjects.front();
  if (!names.empty()) cert.common_name = names.front();
  cert.alt_names = Values(context, GRPC_X509_SAN_PROPERTY_NAME);
  if (cert.subject.empty() && cert.common_name.empty() && cert.alt_names.empty()) {
    return std::nullopt;
  }
  return cert;
}

}  // namespace vigil::tls
