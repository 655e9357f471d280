// Which version of an API group the API server serves a resource in, as client-go's discovery
// finds it: GET /apis/GROUP/VERSION (an APIResourceList; 404 when the version is not served) for
// each version in the caller's order of preference, the first that lists the resource winning.
// A resource may move between versions at different releases (DeviceTaintRules are served in
// resource.k8s.io/v1 from Kubernetes 1.37, v1beta2 in 1.36, v1alpha3 from 1.33), so each resource
// is resolved on its own. Stateless; thread-safe as the KubeApi it is given.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kube/kube_api.h"

namespace vigil::kube {

// resource.k8s.io's versions of the DRA resources Vigil reads and writes, newest first: what
// Kubernetes 1.33 to 1.38 serve them in (ResourceSlices and ResourceClaims: v1 from 1.34, v1beta2
// from 1.33, v1beta1 from 1.32; DeviceTaintRules: v1 from 1.37, v1beta2 from 1.36, v1alpha3 from
// 1.33 to 1.38).
inline const std::vector<std::string> kResourceSliceVersions = {"v1", "v1beta2", "v1beta1"};
inline const std::vector<std::string> kResourceClaimVersions = {"v1", "v1beta2", "v1beta1"};
inline const std::vector<std::string> kDeviceTaintRuleVersions = {"v1", "v1beta2", "v1alpha3"};

// The first of `versions` (newest first) in which `group` serves `resource` (its plural name,
// "resourceslices"). NotFound, naming what was asked, when none does; Unavailable (with the
// API's answer) when the server could not be asked.
absl::StatusOr<std::string> ServedVersion(KubeApi& api, const std::string& group,
                                          const std::string& resource,
                                          const std::vector<std::string>& versions);

}  // namespace vigil::kube
