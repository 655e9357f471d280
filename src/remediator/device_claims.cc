// Implements DeviceClaims (device_claims.h): ResourceClaim allocations and DeviceTaintRules.
#include "remediator/device_claims.h"

#include <algorithm>

#include "common/status.h"
#include "fmt/format.h"
#include "kube/discovery.h"
#include "kube/object.h"
#include "kube/pods.h"

namespace vigil::remediator {
namespace {

using Json = nlohmann::json;

// The names of the ResourceClaims pod `pod` uses, each once.
std::vector<std::string> ClaimNamesOf(const Json& pod) {
  std::vector<std::string> names;
  const auto add = [&](const std::string& name) {
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
    }
  };
  for (const Json& claim : kube::At(kube::At(pod, "spec"), "resourceClaims")) {
    add(kube::StringAt(claim, "resourceClaimName"));
  }
  for (const Json& status : kube::At(kube::At(pod, "status"), "resourceClaimStatuses")) {
    add(kube::StringAt(status, "resourceClaimName"));
  }
  return names;
}

// Whether one of claim `claim`'s allocated devices is one `holds` says yes to.
bool Holds(const Json& claim, const std::function<bool(const Json& result)>& holds) {
  const Json& results =
      kube::At(kube::At(kube::At(kube::At(claim, "status"), "allocation"), "devices"), "results");
  return std::any_of(results.begin(), results.end(), holds);
}

// The answer with its HTTP status ("HTTP 403: ..."), or why there was none.
std::string AnswerOf(const absl::StatusOr<kube::KubeResponse>& response) {
  return response.ok() ? fmt::format("HTTP {}: {}", response->status, kube::AnswerText(response))
                       : kube::AnswerText(response);
}

}  // namespace

absl::StatusOr<std::string> DeviceClaims::VersionOf(const std::string& resource,
                                                    const std::vector<std::string>& versions,
                                                    std::string* cached) {
  if (!cached->empty()) return *cached;
  absl::StatusOr<std::string> version =
      kube::ServedVersion(*api_, "resource.k8s.io", resource, versions);
  if (version.ok()) *cached = *version;
  return version;
}

absl::StatusOr<std::vector<std::string>> DeviceClaims::PodsHolding(
    const std::string& node, const std::vector<QuarantinedDevice>& devices) {
  return PodsWhoseClaims(node, [&](const Json& result) {
    return std::any_of(devices.begin(), devices.end(), [&](const QuarantinedDevice& device) {
      return kube::StringAt(result, "driver") == device.driver &&
             kube::StringAt(result, "pool") == device.pool &&
             kube::StringAt(result, "device") == device.device;
    });
  });
}

absl::StatusOr<std::vector<std::string>> DeviceClaims::PodsHoldingPool(const std::string& node,
                                                                       const std::string& driver,
                                                                       const std::string& pool) {
  return PodsWhoseClaims(node, [&](const Json& result) {
    return kube::StringAt(result, "driver") == driver && kube::StringAt(result, "pool") == pool;
  });
}

absl::StatusOr<std::vector<std::string>> DeviceClaims::PodsWhoseClaims(
    const std::string& node, const std::function<bool(const Json& result)>& holds) {
  absl::StatusOr<std::string> version =
      VersionOf("resourceclaims", kube::kResourceClaimVersions, &claim_version_);
  if (!version.ok()) return version.status();
  absl::StatusOr<std::vector<Json>> pods = kube::ListPodsOnNode(*api_, node);
  if (!pods.ok()) return pods.status();
  std::vector<std::string> holding;
  for (const Json& pod : *pods) {
    const Json& metadata = kube::At(pod, "metadata");
    const std::string ns = kube::StringAt(metadata, "namespace");
    for (const std::string& name : ClaimNamesOf(pod)) {
      const std::string path = fmt::format(
          "/apis/resource.k8s.io/{}/namespaces/{}/resourceclaims/{}", *version, ns, name);
      absl::StatusOr<kube::KubeResponse> response = api_->Call("GET", path, "", "");
      if (response.ok() && response->status == 404) continue;  // deleted with its pod
      if (!response.ok() || response->status != 200) {
        return absl::UnavailableError(
            fmt::format("reading ResourceClaim {}/{}: {}", ns, name, AnswerOf(response)));
      }
      if (Holds(Json::parse(response->body, nullptr, /*allow_exceptions=*/false), holds)) {
        holding.push_back(ns + "/" + kube::StringAt(metadata, "name"));
        break;
      }
    }
  }
  return holding;
}

absl::StatusOr<std::vector<DeviceClaims::NodeRule>> DeviceClaims::NodeRules() {
  absl::StatusOr<std::string> version =
      VersionOf("devicetaintrules", kube::kDeviceTaintRuleVersions, &rule_version_);
  if (!version.ok()) return version.status();
  absl::StatusOr<kube::KubeResponse> response =
      api_->Call("GET",
                 fmt::format("/apis/resource.k8s.io/{}/devicetaintrules?labelSelector={}", *version,
                             kube::QueryEscape(std::string(kRuleNodeLabel))),
                 "", "");
  if (!response.ok() || response->status != 200) {
    return absl::UnavailableError(
        fmt::format("listing the health checks' DeviceTaintRules: {}", AnswerOf(response)));
  }
  std::vector<NodeRule> rules;
  const Json list = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  for (const Json& rule : kube::At(list, "items")) {
    const Json& metadata = kube::At(rule, "metadata");
    rules.push_back({.name = kube::StringAt(metadata, "name"),
                     .node = kube::StringAt(kube::At(metadata, "labels"), kRuleNodeLabel)});
  }
  return rules;
}

absl::Status DeviceClaims::DeleteRule(const std::string& name) {
  absl::StatusOr<std::string> version =
      VersionOf("devicetaintrules", kube::kDeviceTaintRuleVersions, &rule_version_);
  if (!version.ok()) return version.status();
  absl::StatusOr<kube::KubeResponse> response = api_->Call(
      "DELETE", fmt::format("/apis/resource.k8s.io/{}/devicetaintrules/{}", *version, name), "",
      "");
  if (response.ok() &&
      (response->status == 200 || response->status == 202 || response->status == 404)) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      fmt::format("deleting DeviceTaintRule {}: {}", name, AnswerOf(response)));
}

absl::StatusOr<bool> DeviceClaims::RuleExists(const std::string& name) {
  absl::StatusOr<std::string> version =
      VersionOf("devicetaintrules", kube::kDeviceTaintRuleVersions, &rule_version_);
  if (!version.ok()) return version.status();
  absl::StatusOr<kube::KubeResponse> response = api_->Call(
      "GET", fmt::format("/apis/resource.k8s.io/{}/devicetaintrules/{}", *version, name), "", "");
  if (response.ok() && response->status == 404) return false;
  if (!response.ok() || response->status != 200) {
    return absl::UnavailableError(
        fmt::format("reading DeviceTaintRule {}: {}", name, AnswerOf(response)));
  }
  return true;
}

}  // namespace vigil::remediator
