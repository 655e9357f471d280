// Kubernetes manifests as the deployment tests read them: `kubectl kustomize` renders a
// directory into objects, and the checks every Vigil layout must pass (CheckLayout) are shared by
// the plain and the TLS overlays' tests. Gtest assertions inside; not thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "yaml-cpp/yaml.h"

namespace vigil::testing {

// The objects `kubectl kustomize DIR` printed.
struct Rendered {
  std::vector<YAML::Node> objects;
  // The object of `kind` named `name`; nullptr when there is none.
  const YAML::Node* Find(const std::string& kind, const std::string& name) const;
  std::vector<const YAML::Node*> All(const std::string& kind) const;
};

// Renders `dir`, expecting success and no deprecation warning.
Rendered Render(const std::string& dir);

std::vector<std::string> Strings(const YAML::Node& node);
// Whether every label of `selector` is on `labels`.
bool Selects(const YAML::Node& selector, const YAML::Node& labels);
// A DaemonSet's (or Deployment's) first container.
const YAML::Node Container(const YAML::Node& workload);
// The downward-API field path of the container's env variable `name`; "" when none.
std::string EnvFieldPath(const YAML::Node& container, const std::string& name);

// How the clients reach the engine's TCP port in a layout.
enum class EngineTransport { kPlain, kMutualTls };

// The node-local architecture: three DaemonSets in `namespace_name`, the engine's node-local
// Service on 5555, clients pointed at it, probes, hardening, least-privilege RBAC, the
// NetworkPolicy, the Prometheus Operator objects.
void CheckLayout(const Rendered& rendered, const std::string& namespace_name,
                 EngineTransport transport = EngineTransport::kPlain);

// Runs the binary with a container's args (after `replace`): they parse, and it fails only for
// want of the in-cluster credentials; returns its stderr.
std::string RunArgs(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& replace = {});

}  // namespace vigil::testing
