// What the remediator reads of Dynamic Resource Allocation for a GPU-level episode (a GPU that the
// node's health check quarantined with a DeviceTaintRule): which pods on the node hold the failing
// devices through their ResourceClaims — a pod's claims are named in `spec.resourceClaims`
// (`resourceClaimName`) or, when made from a template, in `status.resourceClaimStatuses`; a claim
// holds the devices of its `status.allocation.devices.results` (driver, pool, device) — and whether
// a rule is still in place. The resource.k8s.io version of each resource is discovered once
// (ResourceClaims: v1, v1beta2, v1beta1; DeviceTaintRules: v1, v1beta2, v1alpha3).
// Thread-compatible: used by the remediator's pass thread only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/remediation.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil::remediator {

class DeviceClaims {
 public:
  // `api` is not owned and outlives this.
  explicit DeviceClaims(kube::KubeApi* api) : api_(api) {}

  // The pods on `node` ("NS/NAME", in the API's order) whose ResourceClaims were allocated one of
  // `devices`. A claim that is gone is skipped; Unavailable when the pods or a claim could not be
  // read (the caller decides again next pass), NotFound when the cluster serves no
  // ResourceClaims.
  absl::StatusOr<std::vector<std::string>> PodsHolding(
      const std::string& node, const std::vector<QuarantinedDevice>& devices);

  // The pods on `node` whose ResourceClaims were allocated any device of `driver`'s pool `pool`
  // (a reboot's drain: every GPU the node's driver publishes). Errors as PodsHolding().
  absl::StatusOr<std::vector<std::string>> PodsHoldingPool(const std::string& node,
                                                           const std::string& driver,
                                                           const std::string& pool);

  // A DeviceTaintRule a health check made, and the node its label names.
  struct NodeRule {
    std::string name, node;
  };
  // Every DeviceTaintRule labelled with a node (kRuleNodeLabel): a few, one per quarantined GPU.
  // NotFound when the cluster serves no DeviceTaintRules; Unavailable when they could not be read.
  absl::StatusOr<std::vector<NodeRule>> NodeRules();
  // Deletes DeviceTaintRule `name` (one already gone is done). Unavailable otherwise.
  absl::Status DeleteRule(const std::string& name);

  // Whether DeviceTaintRule `name` exists. Unavailable when it could not be read.
  absl::StatusOr<bool> RuleExists(const std::string& name);

 private:
  // The pods on `node` holding a device `holds` says yes to.
  absl::StatusOr<std::vector<std::string>> PodsWhoseClaims(
      const std::string& node, const std::function<bool(const nlohmann::json& result)>& holds);
  // The version `resource` is served in (discovered once).
  absl::StatusOr<std::string> VersionOf(const std::string& resource,
                                        const std::vector<std::string>& versions,
                                        std::string* cached);

  kube::KubeApi* const api_;
  std::string claim_version_, rule_version_;  // "" until discovered
};

}  // namespace vigil::remediator
