// Implements the identity check every link shares.
#include "drill/link.h"

#include "api/convert.h"
#include "fmt/format.h"

namespace vigil::drill {

absl::Status CheckFollows(const std::string& link_name, const std::string& instance_id,
                          const std::string& node, const Target& target) {
  if (instance_id.empty() || instance_id == target.instance_id) return absl::OkStatus();
  return absl::FailedPreconditionError(fmt::format(
      "{} follows engine {} of node {}, not this node's engine ({} of node {}): point it at "
      "this node's engine (on Kubernetes, the Service with internalTrafficPolicy: Local)",
      link_name, instance_id, node.empty() ? "?" : node, target.instance_id, target.node));
}

bool IsBack(int status, const Target& target) {
  return status >= 0 && status <= HealthStatusNumber(target.baseline);
}

}  // namespace vigil::drill
