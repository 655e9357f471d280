// `vigil healthcheck`: the passive health check daemon (a client of its node's engine), with the
// Kubernetes node condition and taint behind --kubernetes / --taint. SIGTERM/SIGINT stop it.
#include "api/node_condition.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/duration.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status.h"
#include "fmt/format.h"
#include "healthcheck/healthcheck.h"
#include "kube/object.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {
namespace {

struct HealthcheckFlags {
  std::string engine;
  std::string listen = ":9401";
  std::string node_name;
  bool kubernetes = false;
  bool taint = false;
  std::string untaint_after = "5m";
  std::string heartbeat = "5m";
  std::string unknown_after = "30s";
  KubeFlags kube;
  bool remediation = false;
  std::string engine_token_file;
  EngineTlsFlags engine_tls;
  std::string web_config_file;
  bool exporter_metrics = false;
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string reboot_sentinel;
  std::string dra_driver = std::string(dra::kNvidiaGpuDriver);
  std::string quarantine = "auto";
  std::string device_taint_effect = "NoSchedule";
  std::string log_level = "info";
};

absl::StatusOr<HealthcheckOptions> OptionsFromFlags(const HealthcheckFlags& flags) {
  HealthcheckOptions options{.listen = flags.listen};
  options.node_name = flags.node_name.empty() ? DefaultNodeName() : flags.node_name;
  if (absl::Status status = CheckNodeName(options.node_name); !status.ok()) return status;
  const std::pair<const char*, const std::string*> durations[] = {
      {"--untaint-after", &flags.untaint_after},
      {"--unknown-after", &flags.unknown_after},
      {"--heartbeat", &flags.heartbeat}};
  absl::Duration* targets[] = {&options.reporter.untaint_after, &options.unknown_after,
                               &options.reporter.heartbeat};
  for (size_t i = 0; i < std::size(durations); ++i) {
    auto duration = ParseDuration(*durations[i].second);
    if (!duration.ok()) return WithContext(duration.status(), durations[i].first);
    *targets[i] = *duration;
  }
  if (options.reporter.heartbeat < absl::Seconds(10)) {
    return absl::InvalidArgumentError(fmt::format(
        "--heartbeat {} is too short: every heartbeat is a write of the Node object; give at "
        "least 10s (the kubelet uses 5m)",
        flags.heartbeat));
  }
  if (flags.taint && !flags.kubernetes) {
    return absl::InvalidArgumentError("--taint needs --kubernetes (it taints the Kubernetes node)");
  }
  if (absl::Status status = CheckKubeFlags(flags.kube); !status.ok()) return status;
  options.reporter.node_name = options.node_name;
  options.reporter.event_namespace = flags.kube.event_namespace;
  options.reporter.taint = flags.taint;
  options.reporter.taint_key = flags.kube.taint_key;
  options.reporter.max_tainted_share = flags.kube.max_tainted_share;
  options.reporter.gpu_node_selector = flags.kube.gpu_node_selector;
  std::tie(options.reporter.breaker_namespace, options.reporter.breaker_name) =
      BreakerObject(flags.kube);
  if (flags.remediation && !flags.kubernetes) {
    return absl::InvalidArgumentError(
        "--remediation needs --kubernetes (it hands off through the Kubernetes node)");
  }
  // A DRA driver's name is a DNS subdomain of at most 63 characters (as the API validates it).
  if (const std::string& driver = flags.dra_driver;
      !driver.empty() && !kube::IsDnsName(driver, /*dots=*/true, 63)) {
    return absl::InvalidArgumentError(fmt::format(
        "--dra-driver '{}' is not a DRA driver name: give a lower-case DNS subdomain such as "
        "gpu.nvidia.com, or '' for none",
        driver));
  }
  options.dra_driver = flags.dra_driver;
  absl::StatusOr<QuarantineMode> quarantine = ParseQuarantineMode(flags.quarantine);
  if (!quarantine.ok()) return quarantine.status();
  options.quarantine = *quarantine;
  if (flags.device_taint_effect != "NoSchedule" && flags.device_taint_effect != "NoExecute") {
    return absl::InvalidArgumentError(fmt::format(
        "--device-taint-effect '{}' is not an effect: give NoSchedule (the default) or NoExecute "
        "(the scheduler then evicts the GPU's pods, without honouring PodDisruptionBudgets)",
        flags.device_taint_effect));
  }
  options.device_taint_effect = flags.device_taint_effect;
  options.remediation = flags.remediation;
  options.pod_resources_socket = flags.pod_resources_socket;
  options.reboot_sentinel = flags.reboot_sentinel;
  if (flags.remediation) {
    // The relay's own client: a reset waits for the engine's reset command (up to its limit).
    auto token = ReadEngineToken(flags.engine_token_file, "--engine-token-file");
    if (!token.ok()) return token.status();
    auto relay_engine =
        EngineClient::Create(flags.engine, {.call_timeout = absl::Minutes(3),
                                            .token = *token,
                                            .tls = TlsOptionsFromFlags(flags.engine_tls)});
    if (!relay_engine.ok()) return relay_engine.status();
    options.relay_engine = std::move(*relay_engine);
  }
  if (flags.kubernetes) {
    auto kube = kube::InClusterKube::Create(flags.kube.service_account_dir, "healthcheck");
    if (!kube.ok()) return kube.status();
    options.kube = std::move(*kube);
  }
  return options;
}

int RunHealthcheck(const HealthcheckFlags& flags) {
  SignalWaiter signals;  // before any thread starts
  if (absl::Status status = InitLogging(flags.log_level); !status.ok()) {
    return Fail("healthcheck", WithContext(status, "--log-level"));
  }
  auto options = OptionsFromFlags(flags);
  if (!options.ok()) return Fail("healthcheck", options.status());
  const std::string node_name = options->node_name;
  const bool kubernetes = options->kube != nullptr;
  auto client = EngineClient::Create(flags.engine, {.tls = TlsOptionsFromFlags(flags.engine_tls)});
  if (!client.ok()) return Fail("healthcheck", client.status());
  auto web = LoadWebConfigFlag(flags.web_config_file);
  if (!web.ok()) return Fail("healthcheck", web.status());
  options->http_guard = web->get();
  options->exporter_metrics = flags.exporter_metrics;
  auto check = Healthcheck::Start(std::move(*options), std::move(*client));
  if (!check.ok()) return Fail("healthcheck", check.status());
  spdlog::info("healthcheck listening on {}://{}:{}/status for node {}, engine {}; kubernetes {}{}",
               WebScheme(web->get()), flags.listen.substr(0, flags.listen.rfind(':')),
               (*check)->port(), node_name, flags.engine,
               kubernetes ? "on (condition GpuProblem)" : "off",
               flags.taint ? fmt::format(", taint {}:NoSchedule", flags.kube.taint_key) : "");
  signals.WaitForStop([] { spdlog::info("SIGHUP: the health check has nothing to reload"); },
                      "stopping the health check");
  (*check)->Stop();
  return kExitOk;
}

}  // namespace

CommandRunner AddHealthcheckCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "healthcheck",
      "Passive health check fed by the engine: HTTP status, Kubernetes node condition and taint");
  auto flags = std::make_shared<HealthcheckFlags>();
  flags->engine = std::string(kDefaultEngineAddress);
  command
      ->add_option("--engine", flags->engine,
                   "Engine address: unix:///path, HOST:PORT or tls://HOST:PORT")
      ->envname("VIGIL_ENGINE")
      ->capture_default_str();
  AddEngineTlsFlags(command, &flags->engine_tls);
  AddWebConfigFlag(command, &flags->web_config_file);
  AddExporterMetricsFlag(command, &flags->exporter_metrics);
  command->add_option("--listen", flags->listen, "Address to serve /status, /readyz, /metrics on")
      ->capture_default_str();
  command->add_option("--node-name", flags->node_name,
                      "This node's name; an engine of another node is refused (default: "
                      "$NODE_NAME, else the host name)");
  command->add_flag("--kubernetes", flags->kubernetes,
                    "Keep the node condition GpuProblem and post Events (in-cluster service "
                    "account)");
  command->add_flag("--taint", flags->taint,
                    "Also taint the node NoSchedule while a GPU fails (needs --kubernetes)");
  command
      ->add_option("--heartbeat", flags->heartbeat,
                   "Re-write the node condition (lastHeartbeatTime) this often when nothing "
                   "changed (the kubelet's own period)")
      ->capture_default_str();
  command
      ->add_option("--untaint-after", flags->untaint_after,
                   "Remove the taint only after the node has been healthy this long")
      ->capture_default_str();
  command
      ->add_option("--unknown-after", flags->unknown_after,
                   "Set the condition Unknown after this long without a fresh verdict")
      ->capture_default_str();
  AddKubeFlags(command, &flags->kube,
               "Refuse to taint when this share of the GPU nodes already carry the taint "
               "(circuit breaker; at least one node may always be tainted)");
  command->add_flag("--remediation", flags->remediation,
                    "Hand off with the remediator: publish the node's GPU faults (with the pods of "
                    "each failing GPU) and relay its GPU reset and reboot requests (needs "
                    "--kubernetes)");
  command->add_option("--engine-token-file", flags->engine_token_file,
                      "The engine's token, for the resets --remediation relays over TCP (not "
                      "needed over the Unix socket as root)");
  command
      ->add_option("--pod-resources-socket", flags->pod_resources_socket,
                   "The kubelet's pod-resources socket, for the pods of each failing GPU ('' : "
                   "none; the remediator then drains every GPU pod)")
      ->capture_default_str();
  command
      ->add_option("--dra-driver", flags->dra_driver,
                   "With --kubernetes: the DRA driver whose ResourceSlices publish this node's "
                   "GPUs as devices. The API server's resource.k8s.io version is discovered (v1, "
                   "v1beta2, v1beta1), this node's slices are watched (fieldSelector "
                   "spec.nodeName), and each GPU and MIG instance is matched to its device by "
                   "UUID, else PCI bus id (never by the number in a device's name); /status shows "
                   "the map ('' : none)")
      ->capture_default_str();
  command
      ->add_option(
          "--quarantine", flags->quarantine,
          "With --taint: what a GPU's failure takes out of service. gpu: one "
          "DeviceTaintRule (vigil.dev/gpu-fail=CODE) for the failing GPU's DRA device, the "
          "node and its other GPUs stay schedulable (node-level failures, and a GPU that "
          "is not a DRA device or whose rule the API refuses, still taint the node); "
          "node: the node taint; auto: gpu where the node's GPUs are DRA devices and the "
          "API serves DeviceTaintRules, else node")
      ->capture_default_str();
  command
      ->add_option("--device-taint-effect", flags->device_taint_effect,
                   "The DeviceTaintRules' effect: NoSchedule, or NoExecute (the scheduler evicts "
                   "the device's pods itself, without honouring PodDisruptionBudgets)")
      ->capture_default_str();
  command->add_option("--reboot-sentinel", flags->reboot_sentinel,
                      "With --remediation: the file a reboot request writes (kured's "
                      "/var/run/reboot-required, as mounted); none: reboot requests fail");
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  return [flags] { return RunHealthcheck(*flags); };
}

}  // namespace vigil::cli
