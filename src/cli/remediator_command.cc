// `vigil remediator` (one replica of the cluster's remediator: docs/remediation.md) and `vigil
// remediator status` (a replica's view of each node's state machine, from its /status).
// SIGTERM/SIGINT stop a replica, giving its Lease up. Single-threaded here; the runner has its
// own threads.
#include <iostream>

#include "api/remediation.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/duration.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status.h"
#include "drill/http_get.h"
#include "fmt/format.h"
#include "kube/object.h"
#include "nlohmann/json.hpp"
#include "remediator/runner.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {
namespace {

struct RemediatorFlags {
  std::string mode = "dry-run";
  std::string listen = ":9402";
  std::string identity;
  std::string lease_namespace = "default";
  std::string lease_name = "vigil-remediator";
  std::string lease_duration = "15s";
  int max_attempts = 2;
  std::string attempt_window = "24h";
  int max_concurrent = 1;
  bool cordon = false;
  bool drain_all_pods = false;
  std::vector<std::string> exclude_namespaces;
  std::string device_plugin_selector;
  std::string device_plugin_namespace = "gpu-operator";
  std::string drain_timeout = "10m";
  std::string force_after;
  std::string reboot_via = "none";
  std::string recovery_timeout = "15m";
  std::string untaint_after = "5m";
  KubeFlags kube;
  std::string log_level = "info";
  std::string web_config_file;
  bool exporter_metrics = false;
  // status
  std::string url = "http://127.0.0.1:9402";
  bool json = false;
};

absl::StatusOr<remediator::RunnerOptions> OptionsFromFlags(const RemediatorFlags& flags) {
  remediator::RunnerOptions options{.listen = flags.listen};
  remediator::RemediatorOptions& r = options.remediator;
  auto mode = remediator::ParseMode(flags.mode);
  if (!mode) {
    return absl::InvalidArgumentError(
        fmt::format("--mode '{}': give off, dry-run (record what it would do) or on", flags.mode));
  }
  r.mode = *mode;
  auto via = remediator::ParseRebootVia(flags.reboot_via);
  if (!via) {
    return absl::InvalidArgumentError(fmt::format(
        "--reboot-via '{}': give none (a person reboots), sentinel (kured's file, written by the "
        "node's health check) or label ({}=true for a repair operator)",
        flags.reboot_via, kRebootRequestedLabel));
  }
  r.reboot_via = *via;
  const std::pair<const char*, const std::string*> durations[] = {
      {"--attempt-window", &flags.attempt_window},
      {"--drain-timeout", &flags.drain_timeout},
      {"--recovery-timeout", &flags.recovery_timeout},
      {"--untaint-after", &flags.untaint_after},
      {"--lease-duration", &flags.lease_duration}};
  absl::Duration* targets[] = {&r.attempt_window, &r.drain_timeout, &r.recovery_timeout,
                               &r.untaint_after, &options.lease.duration};
  for (size_t i = 0; i < std::size(durations); ++i) {
    auto duration = ParseDuration(*durations[i].second);
    if (!duration.ok()) return WithContext(duration.status(), durations[i].first);
    if (*duration <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          fmt::format("{} {} must be more than 0", durations[i].first, *durations[i].second));
    }
    *targets[i] = *duration;
  }
  if (!flags.force_after.empty()) {
    auto force = ParseDuration(flags.force_after);
    if (!force.ok()) return WithContext(force.status(), "--force-after");
    if (*force <= absl::ZeroDuration() || *force >= r.drain_timeout) {
      return absl::InvalidArgumentError(fmt::format(
          "--force-after {} must be more than 0 and shorter than --drain-timeout {} (the drain "
          "stops at its timeout)",
          flags.force_after, flags.drain_timeout));
    }
    r.force_after = *force;
  }
  if (options.lease.duration < absl::Seconds(3)) {
    return absl::InvalidArgumentError(fmt::format(
        "--lease-duration {} is too short: the active replica renews every second; give at "
        "least 3s (15s is client-go's default)",
        flags.lease_duration));
  }
  if (flags.max_attempts < 1) {
    return absl::InvalidArgumentError(
        fmt::format("--max-attempts {}: give at least 1 (recoveries per node in --attempt-window)",
                    flags.max_attempts));
  }
  if (flags.max_concurrent < 1) {
    return absl::InvalidArgumentError(
        fmt::format("--max-concurrent {}: give at least 1 (nodes in drain or recovery at once)",
                    flags.max_concurrent));
  }
  if (absl::Status status = CheckKubeFlags(flags.kube); !status.ok()) return status;
  r.max_attempts = flags.max_attempts;
  r.max_concurrent = flags.max_concurrent;
  r.max_tainted_share = flags.kube.max_tainted_share;
  r.cordon = flags.cordon;
  r.drain_all_pods = flags.drain_all_pods;
  r.exclude_namespaces = flags.exclude_namespaces;
  if (!flags.device_plugin_selector.empty() &&
      !kube::IsDnsName(flags.device_plugin_namespace, /*dots=*/false, 63)) {
    return absl::InvalidArgumentError(
        fmt::format("--device-plugin-namespace '{}': give the namespace of the device plugin's "
                    "pods (a DNS label, such as gpu-operator)",
                    flags.device_plugin_namespace));
  }
  if (flags.device_plugin_selector.find_first_of(" \t\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        fmt::format("--device-plugin-selector '{}': give a label selector without spaces, such "
                    "as app=nvidia-device-plugin-daemonset",
                    flags.device_plugin_selector));
  }
  r.device_plugin_selector = flags.device_plugin_selector;
  r.device_plugin_namespace = flags.device_plugin_namespace;
  r.taint_key = flags.kube.taint_key;
  r.gpu_node_selector = flags.kube.gpu_node_selector;
  r.event_namespace = flags.kube.event_namespace;
  std::tie(r.breaker_namespace, r.breaker_name) = BreakerObject(flags.kube);
  // The Pod's name (the downward API's POD_NAME, else the host name, which is the Pod's name in
  // a container).
  const std::string identity = flags.identity.empty() ? EnvOrHostName("POD_NAME") : flags.identity;
  if (identity.empty()) {
    return absl::InvalidArgumentError("--identity is empty and the host has no name: give one");
  }
  r.identity = identity;
  options.lease.identity = identity;
  options.lease.ns = flags.lease_namespace;
  options.lease.name = flags.lease_name;
  return options;
}

int RunRemediator(const RemediatorFlags& flags) {
  SignalWaiter signals;  // before any thread starts
  if (absl::Status status = InitLogging(flags.log_level); !status.ok()) {
    return Fail("remediator", WithContext(status, "--log-level"));
  }
  auto options = OptionsFromFlags(flags);
  if (!options.ok()) return Fail("remediator", options.status());
  auto kube = kube::InClusterKube::Create(flags.kube.service_account_dir, "remediator");
  if (!kube.ok()) return Fail("remediator", kube.status());
  const std::string identity = options->lease.identity;
  auto web = LoadWebConfigFlag(flags.web_config_file);
  if (!web.ok()) return Fail("remediator", web.status());
  options->http_guard = web->get();
  options->exporter_metrics = flags.exporter_metrics;
  auto runner = remediator::Runner::Start(*std::move(options), std::move(*kube));
  if (!runner.ok()) return Fail("remediator", runner.status());
  spdlog::info(
      "remediator {} (mode {}) listening on {}://{}:{}/status; Lease {}/{}; max {} attempt(s) "
      "per node in {}, {} node(s) at once; reboots via {}",
      identity, flags.mode, WebScheme(web->get()), flags.listen.substr(0, flags.listen.rfind(':')),
      (*runner)->port(), flags.lease_namespace, flags.lease_name, flags.max_attempts,
      flags.attempt_window, flags.max_concurrent, flags.reboot_via);
  signals.WaitForStop([] { spdlog::info("SIGHUP: the remediator has nothing to reload"); },
                      "stopping the remediator");
  (*runner)->Stop();
  return kExitOk;
}

int RunStatus(const RemediatorFlags& flags) {
  if (absl::Status valid = drill::CheckHttpUrl("--url", flags.url); !valid.ok()) {
    return Fail("remediator status", valid);
  }
  auto body = drill::HttpGet(flags.url, "/status");
  if (!body.ok()) return Fail("remediator status", body.status());
  const nlohmann::json status = nlohmann::json::parse(*body, nullptr, false);
  if (!status.is_object()) {
    return Fail("remediator status", fmt::format("{}/status is not JSON: is --url a Vigil "
                                                 "remediator?",
                                                 flags.url));
  }
  if (flags.json) {
    std::cout << status.dump() << std::endl;
    return kExitOk;
  }
  std::cout << fmt::format("Remediator {} ({}), mode {}{}\n", status.value("identity", "?"),
                           status.value("leading", false) ? "active" : "standing by",
                           status.value("mode", "?"),
                           status.value("breaker_open", false) ? "; circuit breaker OPEN" : "");
  Table table({"NODE", "STEP", "ACTION", "ATTEMPTS", "SINCE", "INCIDENT", "MESSAGE"});
  for (const nlohmann::json& node : status.value("nodes", nlohmann::json::array())) {
    std::string message = node.value("message", "");
    if (node.contains("waiting")) message = "waiting: " + node.value("waiting", "");
    if (node.contains("dry_run")) message = "dry run recorded";
    table.AddRow({node.value("node", ""), node.value("step", ""), node.value("action", ""),
                  std::to_string(node.value("attempts", 0)), node.value("since", ""),
                  node.value("incident", ""), message});
  }
  table.Print(std::cout);
  return kExitOk;
}

}  // namespace

CommandRunner AddRemediatorCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "remediator",
      "The cluster's remediator: quarantine -> drain -> recover -> verify for failing GPU nodes "
      "(one active replica through a Lease)");
  auto flags = std::make_shared<RemediatorFlags>();
  command
      ->add_option("--mode", flags->mode, "off, dry-run (record every step, change nothing) or on")
      ->capture_default_str();
  command->add_option("--listen", flags->listen, "Address to serve /status and /metrics on")
      ->capture_default_str();
  AddWebConfigFlag(command, &flags->web_config_file);
  AddExporterMetricsFlag(command, &flags->exporter_metrics);
  command->add_option("--identity", flags->identity,
                      "This replica in the Lease and Events (default: $POD_NAME, else the host "
                      "name)");
  command->add_option("--lease-namespace", flags->lease_namespace, "Namespace of the Lease")
      ->capture_default_str();
  command->add_option("--lease-name", flags->lease_name, "Name of the Lease")
      ->capture_default_str();
  command
      ->add_option("--lease-duration", flags->lease_duration,
                   "How long the active replica's renewal counts")
      ->capture_default_str();
  command
      ->add_option("--max-attempts", flags->max_attempts,
                   "Recoveries per node in --attempt-window; then vigil.dev/needs-inspection")
      ->capture_default_str();
  command->add_option("--attempt-window", flags->attempt_window, "Window of --max-attempts")
      ->capture_default_str();
  command
      ->add_option("--max-concurrent", flags->max_concurrent,
                   "Nodes in drain or recovery at once, cluster-wide")
      ->capture_default_str();
  command->add_flag("--cordon", flags->cordon, "Also cordon a node while it is remediated");
  command->add_flag("--drain-all-pods", flags->drain_all_pods,
                    "For a reboot, evict every pod not owned by a DaemonSet, not only GPU pods");
  command->add_option("--exclude-namespace", flags->exclude_namespaces,
                      "Never evict pods of this namespace (repeatable)");
  command->add_option(
      "--device-plugin-selector", flags->device_plugin_selector,
      "Labels of the device plugin's pods (app=nvidia-device-plugin-daemonset): after a verified "
      "recovery with allocatable nvidia.com/gpu below capacity, the node's plugin pod is deleted "
      "once so it offers the recovered GPU again (needs pods delete in that namespace; default: "
      "off)");
  command
      ->add_option("--device-plugin-namespace", flags->device_plugin_namespace,
                   "The namespace of the device plugin's pods (with --device-plugin-selector)")
      ->capture_default_str();
  command
      ->add_option("--drain-timeout", flags->drain_timeout,
                   "Stop and report a drain that PodDisruptionBudgets hold up this long")
      ->capture_default_str();
  command->add_option("--force-after", flags->force_after,
                      "Delete a pod a PodDisruptionBudget still protects this long into the drain "
                      "(default: never; needs pods delete in the ClusterRole)");
  command
      ->add_option("--reboot-via", flags->reboot_via,
                   "How a reboot is requested: none (a person), sentinel (kured), label")
      ->capture_default_str();
  command
      ->add_option("--recovery-timeout", flags->recovery_timeout,
                   "Escalate when a reset or reboot shows no result in this long")
      ->capture_default_str();
  command
      ->add_option("--untaint-after", flags->untaint_after,
                   "PASS held this long before a node is handed back")
      ->capture_default_str();
  AddKubeFlags(command, &flags->kube,
               "Start no remediation while more than this share of the GPU nodes is tainted");
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  CLI::App* status = command->add_subcommand(
      "status", "Show each node's remediation step, from a remediator replica's /status");
  status->add_option("--url", flags->url, "The replica's address")->capture_default_str();
  status->add_flag("--json", flags->json, "Print the replica's JSON");
  return [flags, status] { return status->parsed() ? RunStatus(*flags) : RunRemediator(*flags); };
}

}  // namespace vigil::cli
