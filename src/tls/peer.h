// The client certificate a gRPC call came with, as the TLS handshake verified it (gRPC's
// AuthContext), and the one name the audit trail gives it. Pure functions: thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "grpcpp/security/auth_context.h"

namespace vigil::tls {

struct PeerCertificate {
  std::string subject;  // "CN=ops,O=example" (RFC 2253)
  std::string common_name;
  std::vector<std::string> alt_names;  // DNS, URI (SPIFFE), email, IP

  // The name to audit and to grant by: the first URI SAN (a SPIFFE id), else the first other SAN,
  // else the common name, else the subject.
  std::string Identity() const;
  // Whether `identity` is one of the certificate's names: any SAN, its CN or its whole subject.
  bool Names(const std::string& identity) const;
};

// Whether the call came over TLS.
bool IsTls(const grpc::AuthContext& context);
// The certificate the client presented and the handshake verified; nullopt without one.
std::optional<PeerCertificate> PeerCertificateOf(const grpc::AuthContext& context);

}  // namespace vigil::tls
