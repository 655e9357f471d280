// Implements ServedVersion: one GET of each version's resource list until one lists the resource.
#include "kube/discovery.h"

#include "absl/strings/str_join.h"
#include "common/status.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace vigil::kube {

absl::StatusOr<std::string> ServedVersion(KubeApi& api, const std::string& group,
                                          const std::string& resource,
                                          const std::vector<std::string>& versions) {
  for (const std::string& version : versions) {
    const std::string path = fmt::format("/apis/{}/{}", group, version);
    absl::StatusOr<KubeResponse> response = api.Call("GET", path, "", "");
    if (!response.ok()) {
      return absl::UnavailableError(
          fmt::format("asking the API server which {} versions it serves: {}", group,
                      MessageOf(response.status())));
    }
    if (response->status == 404) continue;  // not served at all
    if (response->status != 200) {
      return absl::UnavailableError(fmt::format("GET {}: HTTP {}: {}", path, response->status,
                                                response->body.substr(0, 200)));
    }
    const nlohmann::json list = nlohmann::json::parse(response->body, nullptr, false);
    if (!list.is_object() || !list.contains("resources") || !list["resources"].is_array()) {
      return absl::UnavailableError(
          fmt::format("GET {}: the answer is not an APIResourceList", path));
    }
    for (const nlohmann::json& entry : list["resources"]) {
      if (entry.is_object() && entry.value("name", "") == resource) return version;
    }
  }
  return absl::NotFoundError(fmt::format("the API server serves no {} in {} (asked {})", resource,
                                         group, absl::StrJoin(versions, ", ")));
}

}  // namespace vigil::kube
