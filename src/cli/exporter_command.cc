// `vigil exporter`: the Prometheus exporter daemon (a client of the node's engine), with the
// flags dcgm-exporter users know (-f for the counters file, -k for Kubernetes pod mapping).
// SIGHUP re-reads the counters file; SIGTERM/SIGINT stop it.
#include <unistd.h>

#include <cstdlib>
#include <tuple>

#include "cli/commands.h"
#include "cli/output.h"
#include "common/duration.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status.h"
#include "exporter/exporter.h"
#include "fmt/format.h"
#include "kube/kube_api.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {
namespace {

struct ExporterFlags {
  std::string engine;
  EngineTlsFlags engine_tls;
  std::string listen = ":9400";
  std::string collectors;
  CompatFlags compat;
  std::string node_name;
  bool kubernetes = false;
  bool pod_uid = false;
  bool dra = false;
  bool virtual_gpus = false;
  std::string proc_root = "/proc";
  std::string service_account_dir = std::string(kube::InClusterKube::kServiceAccountDir);
  std::string gpu_id_type = "uid";
  bool no_hostname = false;
  bool old_namespace = false;
  int64_t collect_interval_ms = 0;
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string pod_refresh = "10s";
  std::string xid_window = "5m";
  std::string clock_events_window = "5m";
  std::string log_level = "info";
  std::string web_config_file;
  bool exporter_metrics = false;
};

int RunExporter(const ExporterFlags& flags) {
  SignalWaiter signals;  // before any thread starts
  if (absl::Status status = InitLogging(flags.log_level); !status.ok()) {
    return Fail("exporter", WithContext(status, "--log-level"));
  }
  auto hostname_label = HostnameLabelFromFlags(flags.compat);
  if (!hostname_label.ok()) return Fail("exporter", hostname_label.status());
  ExporterOptions options{
      .listen = flags.listen,
      .collectors_path = flags.collectors,
      .hostname_label = *hostname_label,
      .hostname = flags.node_name.empty() ? DefaultNodeName() : flags.node_name,
      .kubernetes = flags.kubernetes,
      .gpu_id_type = flags.gpu_id_type == "device-name" ? GpuIdType::kDeviceName : GpuIdType::kUid,
      .old_namespace = flags.old_namespace,
      .collect_interval = absl::Milliseconds(flags.collect_interval_ms)};
  if (flags.no_hostname) options.hostname.clear();
  // The options that read the API server: pod UIDs, and the DRA driver's ResourceSlices.
  for (const auto& [wanted, flag, reads] :
       {std::tuple{flags.pod_uid, "--kubernetes-enable-pod-uid", "pod UIDs"},
        std::tuple{flags.virtual_gpus, "--kubernetes-virtual-gpus", "pod UIDs"},
        std::tuple{flags.dra, "--kubernetes-enable-dra", "this node's ResourceSlices"}}) {
    if (!wanted) continue;
    if (!flags.kubernetes) {
      return Fail("exporter", fmt::format("{} labels pod-attributed series: it needs "
                                          "--kubernetes (-k)",
                                          flag));
    }
    if (options.kube == nullptr) {
      auto kube = kube::InClusterKube::Create(flags.service_account_dir, "exporter");
      if (!kube.ok()) {
        return Fail("exporter", WithContext(kube.status(), fmt::format("{} reads {} from the "
                                                                       "API server",
                                                                       flag, reads)));
      }
      options.kube = std::move(*kube);
    }
    options.node_name = flags.node_name.empty() ? DefaultNodeName() : flags.node_name;
  }
  options.pod_uid = flags.pod_uid;
  options.dra = flags.dra;
  options.virtual_gpus = flags.virtual_gpus;
  options.proc_root = flags.proc_root;
  options.pods.socket_path = flags.pod_resources_socket;
  const std::pair<const char*, const std::string*> durations[] = {
      {"--pod-refresh", &flags.pod_refresh},
      {"--xid-window", &flags.xid_window},
      {"--clock-events-window", &flags.clock_events_window}};
  absl::Duration* targets[] = {&options.pods.refresh, &options.xid_window,
                               &options.clock_events_window};
  for (size_t i = 0; i < std::size(durations); ++i) {
    auto duration = ParseDuration(*durations[i].second);
    if (!duration.ok()) return Fail("exporter", WithContext(duration.status(), durations[i].first));
    if (*duration < absl::Seconds(1)) {
      return Fail("exporter", fmt::format("{} must be at least 1s", durations[i].first));
    }
    *targets[i] = *duration;
  }
  auto web = LoadWebConfigFlag(flags.web_config_file);
  if (!web.ok()) return Fail("exporter", web.status());
  options.http_guard = web->get();
  options.exporter_metrics = flags.exporter_metrics;
  auto client = EngineClient::Create(flags.engine, {.tls = TlsOptionsFromFlags(flags.engine_tls)});
  if (!client.ok()) return Fail("exporter", client.status());
  auto exporter = Exporter::Start(std::move(options), std::move(*client));
  if (!exporter.ok()) return Fail("exporter", exporter.status());
  spdlog::info("exporter listening on {}://{}:{}/metrics, engine {}, counters {}",
               WebScheme(web->get()), flags.listen.substr(0, flags.listen.rfind(':')),
               (*exporter)->port(), flags.engine,
               flags.collectors.empty() ? "dcgm-exporter's defaults" : flags.collectors);
  signals.WaitForStop([&] { (void)(*exporter)->ReloadCounters(); }, "stopping the exporter");
  (*exporter)->Stop();
  return kExitOk;
}

}  // namespace

CommandRunner AddExporterCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "exporter", "Prometheus exporter (drop-in for dcgm-exporter's metrics), fed by the engine");
  auto flags = std::make_shared<ExporterFlags>();
  flags->engine = std::string(kDefaultEngineAddress);
  command
      ->add_option("-r,--engine,--remote-hostengine-info", flags->engine,
                   "Engine address: unix:///path, HOST:PORT or tls://HOST:PORT (-r: "
                   "dcgm-exporter's --remote-hostengine-info)")
      ->envname("VIGIL_ENGINE")
      ->capture_default_str();
  AddEngineTlsFlags(command, &flags->engine_tls);
  AddWebConfigFlag(command, &flags->web_config_file);
  AddExporterMetricsFlag(command, &flags->exporter_metrics);
  command->add_option("-a,--listen", flags->listen, "Address to serve /metrics on")
      ->capture_default_str();
  command->add_option("-f,--collectors", flags->collectors,
                      "Counters file in dcgm-exporter's CSV format (default: its default list)");
  AddCompatFlags(command, &flags->compat);
  command->add_option("--node-name", flags->node_name,
                      "Value of the Hostname label (default: $NODE_NAME, else the host name)");
  command
      ->add_flag("-n,--no-hostname", flags->no_hostname,
                 "Leave the Hostname label out (as dcgm-exporter 3.x's flag did)")
      ->envname("DCGM_EXPORTER_NO_HOSTNAME");
  command
      ->add_flag("-o,--use-old-namespace", flags->old_namespace,
                 "dcgm-exporter 1.x label names: uuid, pod_name, pod_namespace, container_name")
      ->envname("DCGM_EXPORTER_USE_OLD_NAMESPACE");
  command
      ->add_option("-c,--collect-interval", flags->collect_interval_ms,
                   "Milliseconds between changes of the served values, as dcgm-exporter's "
                   "(0: every engine tick)")
      ->envname("DCGM_EXPORTER_INTERVAL")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();
  command->add_flag("-k,--kubernetes", flags->kubernetes,
                    "Add pod, namespace and container labels from the kubelet");
  command
      ->add_flag("--kubernetes-enable-pod-uid", flags->pod_uid,
                 "Add pod_uid to pod-attributed series (with -k): the UIDs of this node's pods "
                 "from the API server (needs pods list and watch)")
      ->envname("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID");
  command
      ->add_flag("--kubernetes-enable-dra", flags->dra,
                 "Add pod labels and the dra_* labels for GPUs pods hold through DRA "
                 "ResourceClaims (with -k): the kubelet's dynamic_resources, each device matched "
                 "to its GPU by the gpu.nvidia.com driver's ResourceSlices of this node (needs "
                 "resourceslices list and watch)")
      ->envname("KUBERNETES_ENABLE_DRA");
  command
      ->add_flag("--kubernetes-virtual-gpus", flags->virtual_gpus,
                 "For GPUs and MIG instances several containers share (time-slicing, MPS): "
                 "each series once per container, and DCGM_FI_DEV_FB_USED and "
                 "DCGM_FI_DEV_GPU_UTIL per pod from its processes (with -k; reads --proc-root "
                 "and this node's pod UIDs from the API server: pods list and watch)")
      ->envname("KUBERNETES_VIRTUAL_GPUS");
  command
      ->add_option("--proc-root", flags->proc_root,
                   "The host's /proc (mounted read-only in a container), where the GPUs' "
                   "processes are looked up for --kubernetes-virtual-gpus")
      ->capture_default_str();
  command
      ->add_option("--service-account-dir", flags->service_account_dir,
                   "Where the pod's service account token and CA are mounted (for "
                   "--kubernetes-enable-pod-uid, --kubernetes-virtual-gpus and "
                   "--kubernetes-enable-dra)")
      ->capture_default_str();
  command
      ->add_option("--kubernetes-gpu-id-type", flags->gpu_id_type,
                   "How the kubelet names whole GPUs: uid (GPU-...) or device-name (nvidia0); MIG "
                   "devices are matched by their own ids either way")
      ->envname("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE")
      ->check(CLI::IsMember({"uid", "device-name"}))
      ->capture_default_str();
  command
      ->add_option("--pod-resources-socket", flags->pod_resources_socket,
                   "The kubelet's pod-resources socket")
      ->capture_default_str();
  command->add_option("--pod-refresh", flags->pod_refresh, "How often to re-read pod attribution")
      ->capture_default_str();
  command->add_option("--xid-window", flags->xid_window, "Window of DCGM_EXP_XID_ERRORS_COUNT")
      ->capture_default_str();
  command
      ->add_option("--clock-events-window", flags->clock_events_window,
                   "Window of DCGM_EXP_CLOCK_EVENTS_COUNT")
      ->capture_default_str();
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  return [flags] { return RunExporter(*flags); };
}

}  // namespace vigil::cli
