// The flags the Kubernetes-facing daemons share (the health check and the remediator): the taint,
// the GPU nodes, the Events' namespace, the service account, the circuit breaker — registered and
// checked in one place so they mean the same in both. Single-threaded (parsing).
#include <algorithm>
#include <cctype>

#include "cli/commands.h"
#include "fmt/format.h"
#include "kube/object.h"

namespace vigil::cli {
namespace {

// A taint key is a qualified name: an optional DNS-subdomain prefix and '/', then 1-63
// characters of [A-Za-z0-9-_.] starting and ending alphanumeric.
absl::Status CheckTaintKey(const std::string& key) {
  const size_t slash = key.rfind('/');
  const std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
  bool ok = !name.empty() && name.size() <= 63 &&
            std::isalnum(static_cast<unsigned char>(name.front())) &&
            std::isalnum(static_cast<unsigned char>(name.back()));
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  }
  if (slash != std::string::npos) {
    const std::string prefix = key.substr(0, slash);
    ok = ok && !prefix.empty() && prefix.size() <= 253;
    for (char c : prefix) {
      ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                  std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.');
    }
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "--taint-key '{}' is not a valid taint key: use [prefix/]name, e.g. vigil.dev/gpu-problem",
      key));
}

}  // namespace

void AddKubeFlags(CLI::App* command, KubeFlags* flags, const std::string& share_help) {
  command->add_option("--taint-key", flags->taint_key, "Key of the health check's taint")
      ->capture_default_str();
  command->add_option("--max-tainted-share", flags->max_tainted_share, share_help)
      ->capture_default_str();
  command
      ->add_option("--gpu-node-selector", flags->gpu_node_selector,
                   "Label selector of the cluster's GPU nodes")
      ->capture_default_str();
  command->add_option("--event-namespace", flags->event_namespace, "Namespace of the Events")
      ->capture_default_str();
  command
      ->add_option("--circuit-breaker", flags->circuit_breaker,
                   "NAMESPACE/NAME of the ConfigMap where the remediator publishes the "
                   "tainted-share circuit breaker")
      ->capture_default_str();
  command
      ->add_option("--service-account-dir", flags->service_account_dir,
                   "Where the pod's service account token and CA are mounted")
      ->capture_default_str();
}

std::pair<std::string, std::string> BreakerObject(const KubeFlags& flags) {
  const size_t slash = flags.circuit_breaker.find('/');
  return {flags.circuit_breaker.substr(0, slash),
          slash == std::string::npos ? "" : flags.circuit_breaker.substr(slash + 1)};
}

absl::Status CheckKubeFlags(const KubeFlags& flags) {
  const auto [ns, name] = BreakerObject(flags);
  // A namespace is a DNS label, a ConfigMap's name a DNS subdomain.
  if (!kube::IsDnsName(ns, /*dots=*/false, 63) || !kube::IsDnsName(name, /*dots=*/true, 253)) {
    return absl::InvalidArgumentError(
        fmt::format("--circuit-breaker '{}' is not NAMESPACE/NAME of a ConfigMap: give e.g. "
                    "vigil/vigil-circuit-breaker (the remediator's namespace)",
                    flags.circuit_breaker));
  }
  if (absl::Status status = CheckTaintKey(flags.taint_key); !status.ok()) return status;
  if (!(flags.max_tainted_share > 0 && flags.max_tainted_share <= 1)) {
    return absl::InvalidArgumentError(fmt::format(
        "--max-tainted-share {} is out of range: give a share of the GPU nodes in (0, 1]",
        flags.max_tainted_share));
  }
  if (flags.gpu_node_selector.empty()) {
    return absl::InvalidArgumentError(
        "--gpu-node-selector is empty: give the label selector of the GPU nodes, e.g. "
        "nvidia.com/gpu.present=true");
  }
  return absl::OkStatus();
}

}  // namespace vigil::cli
