// The client subcommands of `vigil` (those that follow an engine, never host one). Each Add*Command
// registers its flags on a new subcommand of `parent` and returns the function that runs it once
// parsing has succeeded; the function returns the process exit code (see output.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "api/circuit_breaker.h"
#include "api/node_condition.h"
#include "client/engine_client.h"
#include "kube/kube_api.h"
#include "tls/credentials.h"
#include "webconfig/guard.h"

namespace vigil::cli {

using CommandRunner = std::function<int()>;

CommandRunner AddInfoCommand(CLI::App* parent);
CommandRunner AddDiscoveryCommand(CLI::App* parent);
CommandRunner AddDmonCommand(CLI::App* parent);
CommandRunner AddInjectCommand(CLI::App* parent);
CommandRunner AddEventsCommand(CLI::App* parent);
CommandRunner AddHealthCommand(CLI::App* parent);
CommandRunner AddExporterCommand(CLI::App* parent);
CommandRunner AddHealthcheckCommand(CLI::App* parent);
CommandRunner AddDrillCommand(CLI::App* parent);
CommandRunner AddResetGpuCommand(CLI::App* parent);
CommandRunner AddRemediatorCommand(CLI::App* parent);
CommandRunner AddHistoryCommand(CLI::App* parent);
CommandRunner AddRecordingsCommand(CLI::App* parent);
CommandRunner AddReportCommand(CLI::App* parent);

// $NODE_NAME (the downward API on Kubernetes), else the host name; "" if neither is known.
std::string DefaultNodeName();
// The same for another variable ($POD_NAME: a Pod's host name is its name).
std::string EnvOrHostName(const char* variable);
// Kubernetes node names are DNS subdomains; accept those (and underscores, seen on bare metal).
absl::Status CheckNodeName(const std::string& name);

// TLS to the engine's TCP listener, as every client takes it: --tls-ca, --tls-cert, --tls-key,
// --tls-server-name (and VIGIL_TLS_CA, VIGIL_TLS_CERT, VIGIL_TLS_KEY, VIGIL_TLS_SERVER_NAME).
struct EngineTlsFlags {
  std::string ca;
  std::string cert;
  std::string key;
  std::string server_name;
};
void AddEngineTlsFlags(CLI::App* command, EngineTlsFlags* flags);
// TLS is on when any of the files is given (or, in EngineClient, for a tls:// address).
tls::ClientTlsOptions TlsOptionsFromFlags(const EngineTlsFlags& flags);

// --web-config-file on an HTTP endpoint's command (exporter, health check, remediator).
void AddWebConfigFlag(CLI::App* command, std::string* path);
// The web config of `path` in force ("" : none, plain HTTP); its one-line error otherwise.
absl::StatusOr<std::unique_ptr<webconfig::WebConfigGuard>> LoadWebConfigFlag(
    const std::string& path);
// "http" or "https", for the line that says where an endpoint listens.
std::string WebScheme(const webconfig::WebConfigGuard* guard);

// --enable-exporter-metrics on an HTTP endpoint's command (dcgm-exporter 4.8.4's flag, and its
// DCGM_EXPORTER_ENABLE_EXPORTER_METRICS): the process's own process_* series on /metrics.
void AddExporterMetricsFlag(CLI::App* command, bool* enabled);

// The exporter's output as a dcgm-exporter release writes it (exporter and node): --compat
// 4.8.2|4.8.3 and --hostname-label, which overrides the release's spelling of the node label.
struct CompatFlags {
  std::string release = "4.8.2";
  std::string hostname_label;  // "": the release's
};
void AddCompatFlags(CLI::App* command, CompatFlags* flags);
// The node label's spelling; the one-line error of an unknown release.
absl::StatusOr<std::string> HostnameLabelFromFlags(const CompatFlags& flags);

// Flags every client command shares.
struct ClientFlags {
  std::string engine;
  EngineTlsFlags tls;
  bool json = false;
  std::string timeout = "5s";
  std::string log_level = "warn";
  std::string token_file;  // injection commands only: the token for TCP
};
void AddClientFlags(CLI::App* command, ClientFlags* flags);
// --token-file, for the commands that inject or clear (privileged over TCP).
void AddTokenFileFlag(CLI::App* command, ClientFlags* flags);
// The flags the Kubernetes-facing daemons share (kube_flags.cc): the health check's taint, the
// GPU nodes, the Events' namespace, the service account, the tainted-share circuit breaker.
struct KubeFlags {
  std::string taint_key = std::string(kDefaultTaintKey);
  double max_tainted_share = 0.5;
  std::string gpu_node_selector = "nvidia.com/gpu.present=true";
  std::string event_namespace = "default";
  std::string service_account_dir = std::string(kube::InClusterKube::kServiceAccountDir);
  // The remediator's published circuit breaker, NAMESPACE/NAME (a ConfigMap).
  std::string circuit_breaker =
      std::string(kDefaultBreakerNamespace) + "/" + std::string(kBreakerConfigMapName);
};
// The namespace and name of --circuit-breaker (checked by CheckKubeFlags).
std::pair<std::string, std::string> BreakerObject(const KubeFlags& flags);
// `share_help`: what --max-tainted-share does in that command.
void AddKubeFlags(CLI::App* command, KubeFlags* flags, const std::string& share_help);
// InvalidArgument naming the flag: a taint key that is not a qualified name, a share out of
// (0, 1], an empty selector, a --circuit-breaker that is not NAMESPACE/NAME.
absl::Status CheckKubeFlags(const KubeFlags& flags);

// The engine's token from the file at `path` (named `flag` in errors); "" for no file.
absl::StatusOr<std::string> ReadEngineToken(const std::string& path, std::string_view flag);
// Sets up logging and a client from the flags; the error says what is wrong with which flag.
absl::StatusOr<std::unique_ptr<EngineClient>> ConnectFromFlags(const ClientFlags& flags);

// The verdict of `request` from the first tick after `before` (what a privileged call changed
// shows from the next tick), or the latest one after three ticks and a second.
absl::StatusOr<v1::HealthVerdict> VerdictAfter(EngineClient& client, const v1::EngineInfo& before,
                                               const v1::GetHealthRequest& request);

}  // namespace vigil::cli
