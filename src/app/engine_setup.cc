// Implements the engine's flags and start-up for the daemon commands.
#include "app/engine_setup.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "backend/deadline_backend.h"
#include "backend/nvml_backend.h"
#include "backend/sim_backend.h"
#include "cli/commands.h"
#include "common/duration.h"
#include "common/status.h"
#include "engine/config.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "network/monitor.h"
#include "network/port_map.h"
#include "network/sim_sysfs.h"
#include "network/sysfs_ports.h"
#include "nvswitch/sxid_source.h"
#include "server/authz.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {
namespace {

absl::Status PrepareStateDir(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) {
    return absl::PermissionDeniedError(
        fmt::format("cannot create the state dir {}: {}: choose another with --state-dir", path,
                    error.message()));
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        fmt::format("the state dir {} is not writable: {}: choose another with --state-dir", path,
                    std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> OpenBackend(const EngineFlags& flags,
                                                     const EngineConfig& config) {
  if (flags.backend == "sim") {
    SimOptions options{.gpu_count = flags.gpus, .seed = flags.seed, .mig = config.sim_mig};
    for (const std::string& text : flags.mig) {
      auto layout = ParseMigLayout(text);
      if (!layout.ok()) return layout.status();
      options.mig.push_back(*std::move(layout));
    }
    for (const std::string& text : flags.sim_processes) {
      auto workload = ParseSimWorkload(text);
      if (!workload.ok()) return workload.status();
      options.workloads.push_back(*std::move(workload));
    }
    auto sim = SimBackend::Create(options);
    if (!sim.ok()) return sim.status();
    return std::unique_ptr<Backend>(std::move(*sim));
  }
  if (flags.gpus_option->count() > 0 || flags.seed_option->count() > 0 ||
      flags.mig_option->count() > 0 || !config.sim_mig.empty() || flags.sim_nics > 0 ||
      !flags.sim_processes.empty()) {
    return absl::InvalidArgumentError(
        "--gpus, --seed, --mig (sim.mig in the config), --sim-nics and --sim-process apply to "
        "--backend sim only "
        "(real GPUs are partitioned with nvidia-smi mig; real NICs are read from --sysfs-root)");
  }
  // Checked before NVML is opened, so a bad command is refused on any machine.
  if (absl::Status valid = ValidateResetCommand(flags.gpu_reset_command); !valid.ok()) {
    return valid;
  }
  auto library = OpenNvml(flags.nvml_library);
  if (!library.ok()) return library.status();
  auto limit = ParseDuration(flags.gpu_reset_timeout);
  if (!limit.ok() || *limit <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(fmt::format(
        "--gpu-reset-timeout '{}' is not a positive duration (e.g. 2m)", flags.gpu_reset_timeout));
  }
  auto nvml = NvmlBackend::Create(std::move(*library), Clock::Real(),
                                  {.command = flags.gpu_reset_command, .limit = *limit});
  if (!nvml.ok()) return nvml.status();
  // A driver call can hang (a GPU going bad, a wedged driver): bound every read.
  return std::unique_ptr<Backend>(
      std::make_unique<DeadlineBackend>(std::move(*nvml), config.EffectiveGpuReadTimeout()));
}

// The network source: the node's NIC ports and the GPUs each serves (the topology's answer, or the
// config's network.ports), said once at start so an operator can check the map, then judged on
// every tick as the network system of those GPUs. A node without NIC ports has no network system.
// A root that is not a directory, or an override naming a port or GPU the node lacks, is refused
// (InvalidArgument: exit 2); each unreadable file or HCA is one warning.
// Returns the source (the engine owns it), or null where the node has no NIC port.
absl::StatusOr<network::NetworkMonitor*> StartNetwork(const std::string& sysfs_root,
                                                      const NetworkPolicy& policy, Engine* engine) {
  auto reader = network::SysfsPorts::Open(Env::Default(), sysfs_root);
  if (!reader.ok()) return reader.status();
  network::SysfsPorts::Discovery found = reader->Discover();
  for (const std::string& problem : found.problems) spdlog::warn("network: {}", problem);
  std::vector<std::string> gpu_bus_ids;
  for (const GpuIdentity& gpu : engine->gpus()) gpu_bus_ids.push_back(gpu.pci_bus_id);
  auto mapped = network::BuildPortMap(Env::Default(), sysfs_root, std::move(found.ports),
                                      gpu_bus_ids, policy.ports);
  if (!mapped.ok()) return mapped.status();
  if (mapped->empty()) {
    spdlog::info("network: no NIC port under {}: the GPUs have no network system", sysfs_root);
    return nullptr;
  }
  spdlog::info(
      "network: {} NIC port(s) under {}, judged as the network system of the GPUs they serve "
      "(state every {}, counters every {})",
      mapped->size(), sysfs_root, absl::FormatDuration(policy.state_interval),
      absl::FormatDuration(policy.counter_interval));
  for (const network::MappedPort& port : *mapped) {
    std::string serves = "the node (no GPU near it)";
    if (!port.attachment.gpus.empty()) {
      serves =
          fmt::format("GPU {} ({})", fmt::join(port.attachment.gpus, ", "),
                      port.overridden ? "config" : network::AffinityName(port.attachment.affinity));
    }
    spdlog::info("network: port {} ({}, {}{}) serves {}", port.port.Name(),
                 port.port.link_layer.has_value() ? network::LinkLayerName(*port.port.link_layer)
                                                  : "link layer unknown",
                 port.port.pci_bus_id.empty() ? "no PCI function" : port.port.pci_bus_id,
                 port.port.net.has_value() ? ", " + port.port.net->name : "", serves);
    if (!port.placement_problem.empty()) spdlog::warn("network: {}", port.placement_problem);
  }
  auto monitor = std::make_unique<network::NetworkMonitor>(
      *std::move(reader), *std::move(mapped), policy, static_cast<uint32_t>(engine->gpus().size()));
  network::NetworkMonitor* source = monitor.get();
  engine->AddHealthSource(std::move(monitor));
  return source;
}

// The simulated node's NIC rails (--sim-nics): a fresh sysfs tree under the state dir, every port
// ACTIVE; returns its root, or "" without --sim-nics.
absl::StatusOr<std::string> WriteSimNics(const EngineFlags& flags,
                                         const std::vector<GpuIdentity>& gpus) {
  if (flags.sim_nics == 0) return std::string();
  if (flags.sysfs_root.has_value()) {
    return absl::InvalidArgumentError(
        "--sim-nics writes the simulated node's sysfs tree itself: leave out --sysfs-root");
  }
  if (flags.sim_nics > gpus.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "--sim-nics {}: the simulated node has {} GPU{}, and a rail serves one: use at most {}",
        flags.sim_nics, gpus.size(), gpus.size() == 1 ? "" : "s", gpus.size()));
  }
  if (flags.state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--sim-nics writes its sysfs tree under the state dir: give a --state-dir");
  }
  const std::string root = flags.state_dir + "/sim-sysfs";
  std::error_code error;
  std::filesystem::remove_all(root, error);  // every start begins with every port up
  if (error) {
    return absl::InternalError(
        fmt::format("cannot remove the previous {}: {}", root, error.message()));
  }
  auto tree = network::SimSysfs::Create(root);
  if (!tree.ok()) return WithContext(tree.status(), "--sim-nics");
  std::vector<std::string> bus_ids;
  for (const GpuIdentity& gpu : gpus) bus_ids.push_back(gpu.pci_bus_id);
  if (absl::Status laid = network::LayOutSimRails(&*tree, bus_ids, flags.sim_nics); !laid.ok()) {
    return WithContext(laid, "--sim-nics");
  }
  spdlog::info(
      "sim: {} NIC rail{} (mlx5_0 .. mlx5_{}) under {}; change a port by its files, e.g. echo '1: "
      "DOWN' > {}/{}/state",
      flags.sim_nics, flags.sim_nics == 1 ? "" : "s", flags.sim_nics - 1, root, root,
      network::SimSysfs::PortDir("mlx5_0", 1));
  return root;
}

// Starts the kernel log as the XID source beside the backend's events: what it holds since boot is
// applied before the first tick (so an XID from before this start is in the first verdict), and
// its state and counts are the engine's counters.
std::unique_ptr<kmsg::KernelLogXids> StartKernelLog(
    const EngineFlags& flags, const std::string& kmsg_path, const std::string& boot_id,
    const HealthPolicy& health_policy, Engine* engine, network::NetworkMonitor* network) {
  std::function<bool(std::string_view, absl::Time)> other_lines;
  if (network != nullptr) {  // the mlx5 driver's lines, for the NIC ports' judges
    other_lines = [network](std::string_view message, absl::Time time) {
      return network->OnKernelLine(message, time);
    };
  }
  auto kernel_log = std::make_unique<kmsg::KernelLogXids>(
      kmsg::KernelLogXidsOptions{
          .path = kmsg_path,
          .journal_dir = flags.journal.has_value()
                             ? *flags.journal
                             : (flags.backend == "nvml" ? "/var/log/journal" : ""),
          .state_path = flags.state_dir + "/kmsg.state",
          .boot_id = boot_id,
          .other_lines = std::move(other_lines)},
      engine->gpus(), engine);
  kmsg::KernelLogXids* source = kernel_log.get();
  // The NVSwitches' SXids are judged by their own source, from this log: attached before the log
  // hands over what it holds since boot.
  engine->AddHealthSource(std::make_unique<nvswitch::SxidSource>(
      health_policy, [source] { return source->reader_stats().state.load(); },
      [engine](const std::string& key, const LogPosition& position) {
        return engine->HealthCountsRecord(std::nullopt, key, position);
      }));
  engine->SetExternalCounters([source](Snapshot::Counters* counters) {
    using KernelLog = Snapshot::Counters::KernelLog;
    switch (source->reader_stats().state.load()) {
      case kmsg::LogState::kReading:
        counters->kernel_log = KernelLog::kReading;
        break;
      case kmsg::LogState::kAbsent:
        counters->kernel_log = KernelLog::kAbsent;
        break;
      case kmsg::LogState::kUnreadable:
        counters->kernel_log = KernelLog::kUnreadable;
        break;
      case kmsg::LogState::kNotStarted:  // not after CatchUp()
        break;
    }
    counters->kernel_log_xids = source->stats().xids;
    counters->kernel_log_unknown_gpu = source->stats().unknown_bus;
    counters->kernel_log_overwritten = source->reader_stats().overwritten;
    counters->kernel_log_source = source->source();
  });
  kernel_log->CatchUp();
  kernel_log->Start();
  return kernel_log;
}

}  // namespace

void AddEngineFlags(CLI::App* command, EngineFlags* flags) {
  command->add_option("--backend", flags->backend, "nvml (real GPUs) or sim (simulated GPUs)")
      ->check(CLI::IsMember({"nvml", "sim"}))
      ->capture_default_str();
  flags->gpus_option =
      command->add_option("--gpus", flags->gpus, "Number of simulated GPUs (--backend sim)")
          ->check(CLI::Range(1u, SimBackend::kMaxGpus))
          ->capture_default_str();
  flags->seed_option =
      command->add_option("--seed", flags->seed, "Seed of the simulation (--backend sim)")
          ->capture_default_str();
  flags->mig_option = command->add_option(
      "--mig", flags->mig,
      "A simulated GPU in MIG mode: GPU:PROFILE[,PROFILE...], e.g. 0:1g.10gb,1g.10gb,2g.20gb "
      "(repeatable, --backend sim)");
  command->add_option("--socket", flags->socket, "Unix socket to serve on ('' disables it)")
      ->capture_default_str();
  command->add_option("--listen", flags->listen, "TCP address to serve on ('' disables it)")
      ->capture_default_str();
  command->add_option("--node-name", flags->node_name,
                      "This node's name (default: $NODE_NAME, else the host name)");
  command->add_option("--state-dir", flags->state_dir, "Where state that outlives a restart goes")
      ->capture_default_str();
  command->add_option("--config", flags->config_path, "YAML config file (see docs/engine.md)");
  command
      ->add_option("--nvml-library", flags->nvml_library,
                   "Path of libnvidia-ml.so.1 (default: the loader's search path)")
      ->envname("VIGIL_NVML_LIBRARY");
  command->add_option("--inject-token-file", flags->inject_token_file,
                      "Token that allows privileged acts over TCP with TLS (off without it)");
  command->add_option("--tls-cert", flags->tls_cert,
                      "PEM certificate chain of the TCP listener: serve TLS (with --tls-key)");
  command->add_option("--tls-key", flags->tls_key, "PEM private key of --tls-cert");
  command->add_option("--tls-client-ca", flags->tls_client_ca,
                      "PEM CA bundle: require client certificates it signed (mutual TLS); what "
                      "each may do is the config's tls_clients");
  command
      ->add_option("--tls-reload-interval", flags->tls_reload_interval,
                   "How often the TLS files are re-read; new connections use changed ones")
      ->capture_default_str();
  command->add_flag("--insecure-token-over-plaintext", flags->insecure_token_over_plaintext,
                    "Accept --inject-token-file's token over plain TCP, where anyone who can "
                    "capture the node's traffic can read it (prefer --tls-cert)");
  command->add_option("--kmsg", flags->kmsg,
                      "Kernel log to read the driver's XIDs from: /dev/kmsg, or a file or FIFO in "
                      "its format; '' for none (default: /dev/kmsg with --backend nvml, none with "
                      "sim)");
  command->add_option("--journal", flags->journal,
                      "Where the kernel's messages are read when the kernel log (--kmsg) cannot "
                      "be opened, as in a container that may not open /dev/kmsg: the systemd "
                      "journal's directory, its kernel entries of this boot; '' for none "
                      "(default: /var/log/journal with --backend nvml, none with sim)");
  command
      ->add_option("--gpu-reset-command", flags->gpu_reset_command,
                   "How --backend nvml resets a GPU (vigil reset-gpu, remediation): a command "
                   "split on blanks, {uuid}, {index} and {pci_bus_id} replaced")
      ->capture_default_str();
  command
      ->add_option("--gpu-reset-timeout", flags->gpu_reset_timeout,
                   "Kill the reset command after this long (the reset then failed)")
      ->capture_default_str();
  command->add_option("--sysfs-root", flags->sysfs_root,
                      "The sysfs mount the node's InfiniBand and RoCE NIC ports are read from "
                      "(the host's /sys where a container mounts it elsewhere; a fake tree in "
                      "tests); '' for none (default: /sys with --backend nvml, none with sim)");
  command->add_option(
      "--sim-process", flags->sim_processes,
      "A compute process of the simulated node, as a pod's workload: GPU[/GI]:PID:MEMORY_MIB"
      "[:SM_PERCENT][@START[-END]], e.g. 2:4001:3072:30@10s-70s — from 10 s to 70 s after the "
      "engine starts (repeatable, --backend sim)");
  command
      ->add_option("--sim-nics", flags->sim_nics,
                   "NIC rails of the simulated node, one per GPU from GPU 0 behind its PCIe switch "
                   "(--backend sim; at most 8 and the GPUs): a sysfs tree under "
                   "STATE_DIR/sim-sysfs, whose files change a port")
      ->check(CLI::Range(0u, network::kMaxSimRails))
      ->capture_default_str();
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
}

namespace {

// The TCP listener's TLS from the flags, each mistake one line: a key or CA without a
// certificate, TLS with no TCP listener, grants no certificate can reach. The files themselves
// are checked as the listener starts.
absl::StatusOr<tls::ServerTlsOptions> CheckTlsFlags(const EngineFlags& flags,
                                                    const EngineConfig& config) {
  tls::ServerTlsOptions tls{.cert_file = flags.tls_cert,
                            .key_file = flags.tls_key,
                            .client_ca_file = flags.tls_client_ca};
  auto interval = ParseDuration(flags.tls_reload_interval);
  if (!interval.ok()) return WithContext(interval.status(), "--tls-reload-interval");
  if (*interval < absl::Seconds(1) || *interval > absl::Hours(24)) {
    return absl::InvalidArgumentError("--tls-reload-interval must be between 1s and 24h");
  }
  tls.reload_interval = *interval;
  if (flags.tls_cert.empty() && (!flags.tls_key.empty() || !flags.tls_client_ca.empty())) {
    return absl::InvalidArgumentError(
        "--tls-key and --tls-client-ca need --tls-cert: give the listener's certificate too");
  }
  if (!flags.tls_cert.empty() && flags.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert needs --tls-key, the certificate's private key");
  }
  if (tls.enabled() && flags.listen.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert secures the TCP listener, and --listen '' turns it off: give --listen "
        "HOST:PORT, or drop the TLS flags (the Unix socket needs none)");
  }
  if (tls.enabled() && flags.insecure_token_over_plaintext) {
    return absl::InvalidArgumentError(
        "--insecure-token-over-plaintext with --tls-cert: the listener is TLS, so the token never "
        "travels in plain text; drop the flag");
  }
  if (!config.tls_clients.empty() && tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: tls_clients grants client certificates, which the engine asks for only with "
        "--tls-client-ca: give it (and --tls-cert, --tls-key)",
        flags.config_path));
  }
  return tls;
}

// What the engine's log says of privileged acts over TCP.
std::string TcpPrivilegesText(bool token, const tls::ServerTlsOptions& tls,
                              const EngineConfig& config, bool token_over_plaintext) {
  std::vector<std::string> ways;
  if (!config.tls_clients.empty()) {
    ways.push_back(fmt::format("for the {} client certificate(s) under tls_clients",
                               config.tls_clients.size()));
  }
  if (token) {
    ways.push_back(tls.enabled() ? "with the token over TLS"
                   : token_over_plaintext
                       ? "with the token over plain TCP (--insecure-token-over-plaintext)"
                       : "not with the token (refused over plain TCP)");
  }
  if (ways.empty()) return "off (no --inject-token-file, no tls_clients)";
  std::string text;
  for (const std::string& way : ways) text += (text.empty() ? "" : " and ") + way;
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunningEngine>> RunningEngine::Start(const EngineFlags& flags) {
  const std::string node_name = flags.node_name.empty() ? DefaultNodeName() : flags.node_name;
  if (absl::Status status = CheckNodeName(node_name); !status.ok()) return status;
  if (flags.socket.empty() && flags.listen.empty()) {
    return absl::InvalidArgumentError(
        "--socket '' and --listen '' leave no way to reach the engine");
  }
  EngineConfig config;
  if (!flags.config_path.empty()) {
    auto loaded = LoadEngineConfig(flags.config_path);
    if (!loaded.ok()) return loaded.status();
    config = *loaded;
  }
  if (absl::Status status = PrepareStateDir(flags.state_dir); !status.ok()) {
    return status;
  }
  auto tls = CheckTlsFlags(flags, config);
  if (!tls.ok()) return tls.status();
  if (!flags.inject_token_file.empty() && !flags.listen.empty() && !tls->enabled() &&
      !flags.insecure_token_over_plaintext) {
    // The Unix socket has no use for the token; over TCP the calls that carry it are refused.
    spdlog::warn(
        "--inject-token-file without TLS: calls that carry the token over plain TCP are refused, "
        "since anyone who can capture the node's traffic could read it; give --tls-cert and "
        "--tls-key, or --insecure-token-over-plaintext to accept that risk");
  }
  std::string inject_token;
  if (!flags.inject_token_file.empty()) {
    auto token = ReadTokenFile(flags.inject_token_file);
    if (!token.ok()) return WithContext(token.status(), "--inject-token-file");
    inject_token = *token;
  }
  const std::string boot_id = CurrentBootId();
  auto backend = OpenBackend(flags, config);
  if (!backend.ok()) return backend.status();
  const size_t gpu_count = (*backend)->gpus().size();
  auto engine = Engine::Create(
      {.node_name = node_name, .config = config, .state_dir = flags.state_dir, .boot_id = boot_id},
      std::move(*backend));
  if (!engine.ok()) return engine.status();
  auto sim_root = WriteSimNics(flags, (*engine)->gpus());
  if (!sim_root.ok()) return sim_root.status();
  const std::string sysfs_root = flags.sysfs_root.has_value()
                                     ? *flags.sysfs_root
                                     : (flags.backend == "nvml" ? "/sys" : *sim_root);
  network::NetworkMonitor* network = nullptr;
  if (!sysfs_root.empty()) {
    auto started = StartNetwork(sysfs_root, config.network, engine->get());
    if (!started.ok()) return started.status();
    network = *started;
  }
  // The kernel log: what it holds since boot is applied before the first tick, so an XID from
  // before this start is in the first verdict.
  const std::string kmsg_path =
      flags.kmsg.has_value() ? *flags.kmsg : (flags.backend == "nvml" ? "/dev/kmsg" : "");
  std::unique_ptr<kmsg::KernelLogXids> kernel_log =
      kmsg_path.empty()
          ? nullptr
          : StartKernelLog(flags, kmsg_path, boot_id, config.health, engine->get(), network);
  auto server = EngineServer::Start(engine->get(),
                                    {.unix_socket_path = flags.socket,
                                     .tcp_address = flags.listen,
                                     .inject_token = inject_token,
                                     .tls = *tls,
                                     .token_over_plaintext = flags.insecure_token_over_plaintext});
  if (!server.ok()) return server.status();
  // The flight recorder follows the ticks from the first: before the loop starts.
  std::unique_ptr<FlightRecorder> recorder;
  if (!flags.state_dir.empty() && config.flight_recorder.max_recordings > 0) {
    auto started = FlightRecorder::Start(
        engine->get(), {.dir = flags.state_dir + "/recordings", .config = config.flight_recorder});
    if (!started.ok()) return started.status();
    recorder = std::move(*started);
  }
  auto loop = std::make_unique<TickLoop>(engine->get(), config.tick_interval);
  loop->Start();
  const std::string tcp =
      flags.listen.empty() ? "off"
                           : fmt::format("{}:{}", flags.listen.substr(0, flags.listen.rfind(':')),
                                         (*server)->tcp_port());
  spdlog::info(
      "engine ready: node={} instance_id={} backend={} gpus={} unix={} tcp={} tick={} "
      "history={} kmsg={} version={}{}",
      node_name, (*engine)->identity().instance_id, (*engine)->identity().backend, gpu_count,
      flags.socket.empty() ? "off" : flags.socket,
      tcp + (flags.listen.empty()          ? ""
             : !tls->enabled()             ? " (plain)"
             : tls->client_ca_file.empty() ? " (TLS)"
                                           : " (mutual TLS)"),
      absl::FormatDuration(config.tick_interval), absl::FormatDuration(config.history_max_age),
      kmsg_path.empty() ? "off" : kmsg_path, (*engine)->identity().version,
      flags.backend == "nvml"
          ? " gpu_read_timeout=" + absl::FormatDuration(config.EffectiveGpuReadTimeout())
          : "");

  spdlog::info(
      "injection: over the Unix socket for root{}; over TCP {}; active injections are "
      "not persisted across restarts",
      config.injection_allowed_uids.empty()
          ? ""
          : fmt::format(" and {} more uid(s)", config.injection_allowed_uids.size()),
      TcpPrivilegesText(!inject_token.empty(), *tls, config, flags.insecure_token_over_plaintext));
  std::unique_ptr<RunningEngine> running(new RunningEngine());
  running->node_name_ = node_name;
  running->engine_ = std::move(*engine);
  running->kernel_log_ = std::move(kernel_log);
  running->server_ = std::move(*server);
  running->loop_ = std::move(loop);
  running->recorder_ = std::move(recorder);
  return running;
}

RunningEngine::~RunningEngine() { Stop(); }

void RunningEngine::Stop() {
  if (engine_ == nullptr) return;
  // The kernel log first: an XID it hands on after the last tick would never be evaluated, and
  // one not yet settled is not written down (the next start applies it).
  if (kernel_log_ != nullptr) kernel_log_->Stop();
  loop_->Stop();
  if (recorder_ != nullptr) {
    recorder_->Flush();  // what the last ticks asked for (the part after stays incomplete)
    recorder_->Stop();
  }
  server_->Shutdown(absl::Seconds(2));
  server_.reset();
  kernel_log_.reset();
  recorder_.reset();
  engine_.reset();
  spdlog::info("engine stopped");
}

}  // namespace vigil::cli
