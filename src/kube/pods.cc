// Implements the pod listing and the Eviction API calls.
#include "kube/pods.h"

#include <algorithm>

#include "fmt/format.h"
#include "kube/object.h"

namespace vigil::kube {

using Json = nlohmann::json;

absl::StatusOr<std::vector<Json>> ListPodsOnNode(KubeApi& api, const std::string& node,
                                                 const std::string& label_selector) {
  std::vector<Json> pods;
  std::string next;
  do {
    std::string path =
        "/api/v1/pods?limit=500&fieldSelector=" + QueryEscape("spec.nodeName=" + node);
    if (!label_selector.empty()) path += "&labelSelector=" + QueryEscape(label_selector);
    if (!next.empty()) path += "&continue=" + QueryEscape(next);
    auto response = api.Call("GET", path, "", "");
    if (!response.ok()) return response.status();
    if (response->status != 200) {
      return absl::FailedPreconditionError(fmt::format("listing the pods of node {}: HTTP {}: {}",
                                                       node, response->status,
                                                       ApiMessage(response->body)));
    }
    const Json list = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (!list.is_object()) {
      return absl::FailedPreconditionError(
          fmt::format("listing the pods of node {}: the answer is not a PodList", node));
    }
    for (const Json& pod : At(list, "items")) pods.push_back(pod);
    next = StringAt(At(list, "metadata"), "continue");
  } while (!next.empty());
  return pods;
}

absl::StatusOr<Eviction> Evict(KubeApi& api, const std::string& ns, const std::string& name,
                               absl::Duration* retry_after) {
  *retry_after = absl::ZeroDuration();
  const Json eviction = {{"apiVersion", "policy/v1"},
                         {"kind", "Eviction"},
                         {"metadata", {{"name", name}, {"namespace", ns}}}};
  auto response = api.Call(
      "POST",
      fmt::format("/api/v1/namespaces/{}/pods/{}/eviction", QueryEscape(ns), QueryEscape(name)),
      kJsonContent, eviction.dump());
  if (!response.ok()) return response.status();
  switch (response->status) {
    case 200:
    case 201:
      return Eviction::kEvicted;
    case 404:
      return Eviction::kGone;
    case 429:
      *retry_after = response->retry_after;
      return Eviction::kBlocked;
    default: {
      const std::string message = fmt::format("evicting pod {}/{}: HTTP {}: {}", ns, name,
                                              response->status, ApiMessage(response->body));
      return response->status >= 500 ? absl::UnavailableError(message)
                                     : absl::FailedPreconditionError(message);
    }
  }
}

absl::StatusOr<bool> DeletePod(KubeApi& api, const std::string& ns, const std::string& name) {
  auto response =
      api.Call("DELETE", "/api/v1/namespaces/" + ns + "/pods/" + name, kJsonContent, "");
  if (!response.ok()) return response.status();
  if (response->status == 200 || response->status == 202) return true;
  if (response->status == 404) return false;
  const std::string message = fmt::format("deleting pod {}/{}: {} {}", ns, name, response->status,
                                          ApiMessage(response->body));
  if (response->status >= 500) return absl::UnavailableError(message);
  return absl::FailedPreconditionError(message);
}

std::vector<std::string> GpuResourcesOf(const Json& pod) {
  std::vector<std::string> out;
  for (const Json& container : At(At(pod, "spec"), "containers")) {
    const Json& resources = At(container, "resources");
    for (const char* kind : {"limits", "requests"}) {
      const Json& amounts = At(resources, kind);
      if (!amounts.is_object()) continue;
      for (const auto& [resource, amount] : amounts.items()) {
        const bool gpu = resource == "nvidia.com/gpu" || resource.starts_with("nvidia.com/mig-");
        const bool some = !(amount.is_string() && amount.get<std::string>() == "0") &&
                          !(amount.is_number() && amount.get<double>() == 0);
        if (gpu && some && std::find(out.begin(), out.end(), resource) == out.end()) {
          out.push_back(resource);
        }
      }
    }
  }
  return out;
}

bool OwnedByDaemonSet(const Json& pod) {
  for (const Json& owner : At(At(pod, "metadata"), "ownerReferences")) {
    if (StringAt(owner, "kind") == "DaemonSet") return true;
  }
  return false;
}

bool IsMirrorPod(const Json& pod) {
  return At(At(At(pod, "metadata"), "annotations"), "kubernetes.io/config.mirror").is_string();
}

}  // namespace vigil::kube
