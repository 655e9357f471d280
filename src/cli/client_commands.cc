// The shared client flags and the read-only commands `vigil info` and `vigil discovery`.
#include <iostream>

#include "api/convert.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/duration.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "exporter/compat.h"
#include "fields/catalogue.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {

void AddClientFlags(CLI::App* command, ClientFlags* flags) {
  flags->engine = std::string(kDefaultEngineAddress);
  command
      ->add_option("--engine", flags->engine,
                   "Engine address: unix:///path/to.sock, HOST:PORT or tls://HOST:PORT")
      ->envname("VIGIL_ENGINE")
      ->capture_default_str();
  AddEngineTlsFlags(command, &flags->tls);
  command->add_flag("--json", flags->json, "Machine-readable JSON output");
  command->add_option("--timeout", flags->timeout, "Deadline for each call to the engine")
      ->capture_default_str();
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
}

void AddEngineTlsFlags(CLI::App* command, EngineTlsFlags* flags) {
  command
      ->add_option("--tls-ca", flags->ca,
                   "PEM CA bundle the engine's certificate must chain to (TLS to its TCP port)")
      ->envname("VIGIL_TLS_CA");
  command
      ->add_option("--tls-cert", flags->cert,
                   "PEM client certificate for mutual TLS with the engine (with --tls-key)")
      ->envname("VIGIL_TLS_CERT");
  command->add_option("--tls-key", flags->key, "PEM private key of --tls-cert")
      ->envname("VIGIL_TLS_KEY");
  command
      ->add_option("--tls-server-name", flags->server_name,
                   "The name the engine's certificate must carry (default: the host dialled)")
      ->envname("VIGIL_TLS_SERVER_NAME");
}

tls::ClientTlsOptions TlsOptionsFromFlags(const EngineTlsFlags& flags) {
  return {.enabled = !flags.ca.empty() || !flags.cert.empty() || !flags.key.empty(),
          .ca_file = flags.ca,
          .cert_file = flags.cert,
          .key_file = flags.key,
          .server_name = flags.server_name};
}

void AddWebConfigFlag(CLI::App* command, std::string* path) {
  command->add_option("--web-config-file", *path,
                      "Web config of the HTTP endpoint in the Prometheus exporter-toolkit format: "
                      "TLS, client certificates, basic auth, headers (docs/security.md)");
}

absl::StatusOr<std::unique_ptr<webconfig::WebConfigGuard>> LoadWebConfigFlag(
    const std::string& path) {
  if (path.empty()) return std::unique_ptr<webconfig::WebConfigGuard>();
  auto guard = webconfig::WebConfigGuard::Load(path, Clock::Real());
  if (!guard.ok()) return guard.status();
  spdlog::info("web config {}: {}", path, (*guard)->Describe());
  return guard;
}

std::string WebScheme(const webconfig::WebConfigGuard* guard) {
  return guard != nullptr && guard->tls() ? "https" : "http";
}

void AddExporterMetricsFlag(CLI::App* command, bool* enabled) {
  command
      ->add_flag("--enable-exporter-metrics", *enabled,
                 "Serve the process's own process_* series (CPU, memory, file descriptors, start "
                 "time, network bytes) on /metrics, after the others")
      ->envname("DCGM_EXPORTER_ENABLE_EXPORTER_METRICS");
}

void AddCompatFlags(CLI::App* command, CompatFlags* flags) {
  command
      ->add_option("--compat", flags->release,
                   "The dcgm-exporter release whose output to match: 4.8.2 (the Hostname label, "
                   "as every release up to it) or 4.8.3 (hostname)")
      ->envname("VIGIL_COMPAT")
      ->capture_default_str();
  command
      ->add_option("--hostname-label", flags->hostname_label,
                   "Spelling of the node label, whatever --compat says: Hostname or hostname")
      ->check(CLI::IsMember({"Hostname", "hostname"}));
}

absl::StatusOr<std::string> HostnameLabelFromFlags(const CompatFlags& flags) {
  auto release = ParseDcgmExporterRelease(flags.release);
  if (!release.ok()) return release.status();
  if (!flags.hostname_label.empty()) return flags.hostname_label;
  return std::string(HostnameLabelOf(*release));
}

void AddTokenFileFlag(CLI::App* command, ClientFlags* flags) {
  command->add_option("--token-file", flags->token_file,
                      "File with the engine's injection token (needed over TCP)");
}

absl::StatusOr<std::string> ReadEngineToken(const std::string& path, std::string_view flag) {
  if (path.empty()) return std::string();
  auto text = ReadFile(path);
  if (!text.ok()) return WithContext(text.status(), flag);
  std::string token(Trim(*text));
  if (token.empty()) return absl::InvalidArgumentError(fmt::format("{}: the file is empty", flag));
  return token;
}

absl::StatusOr<std::unique_ptr<EngineClient>> ConnectFromFlags(const ClientFlags& flags) {
  if (absl::Status status = InitLogging(flags.log_level); !status.ok()) {
    return WithContext(status, "--log-level");
  }
  auto timeout = ParseDuration(flags.timeout);
  if (!timeout.ok()) return WithContext(timeout.status(), "--timeout");
  if (*timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be more than 0");
  }
  auto token = ReadEngineToken(flags.token_file, "--token-file");
  if (!token.ok()) return token.status();
  return EngineClient::Create(
      flags.engine,
      {.call_timeout = *timeout, .token = *token, .tls = TlsOptionsFromFlags(flags.tls)});
}

namespace {

std::string Ago(int64_t unix_us) {
  const absl::Duration age = absl::Now() - absl::FromUnixMicros(unix_us);
  return absl::FormatDuration(absl::Trunc(age, absl::Seconds(1))) + " ago";
}

int RunInfo(const ClientFlags& flags, bool list_fields) {
  auto client = ConnectFromFlags(flags);
  if (!client.ok()) return Fail("info", client.status());
  auto info = (*client)->GetEngineInfo();
  if (!info.ok()) return Fail("info", info.status());
  absl::StatusOr<v1::ListFieldsResponse> fields;
  if (list_fields) {
    fields = (*client)->ListFields();
    if (!fields.ok()) return Fail("info", fields.status());
  }
  if (flags.json) {
    nlohmann::json json = {
        {"engine", (*client)->address()},
        {"node_name", info->node_name()},
        {"instance_id", info->instance_id()},
        {"version", info->version()},
        {"backend", info->backend()},
        {"start_time", FormatTimeUs(info->start_time_us())},
        {"start_time_us", info->start_time_us()},
        {"seq", info->seq()},
        {"seq_time_us", info->seq_time_us()},
        {"tick_interval_us", info->tick_interval_us()},
        {"history_max_age_us", info->history_max_age_us()},
        {"gpu_count", info->gpu_count()},
        {"driver_version", info->driver_version()},
        {"counters",
         {{"ticks", info->counters().ticks()},
          {"gpu_read_failures", info->counters().gpu_read_failures()},
          {"gpu_read_timeouts", info->counters().gpu_read_timeouts()},
          {"xid_events", info->counters().xid_events()},
          {"xid_duplicates", info->counters().xid_duplicates()},
          {"process_read_failures", info->counters().process_read_failures()},
          {"kernel_log", std::string(KernelLogStateText(info->counters().kernel_log()))},
          {"kernel_log_xids", info->counters().kernel_log_xids()},
          {"kernel_log_unknown_gpu", info->counters().kernel_log_unknown_gpu()},
          {"kernel_log_overwritten", info->counters().kernel_log_overwritten()},
          {"kernel_log_source", info->counters().kernel_log_source()},
          {"persistence_pending", info->counters().persistence_pending()},
          {"persistence_lag_seconds", info->counters().persistence_lag_us() / 1e6},
          {"persistence_failures", info->counters().persistence_failures()}}},
        {"last_tick_duration_us", info->last_tick_duration_us()},
    };
    if (list_fields) {
      json["fields"] = nlohmann::json::array();
      for (const auto& field : fields->fields()) {
        json["fields"].push_back(
            {{"id", field.id()},
             {"name", field.name()},
             {"aliases", std::vector<std::string>(field.aliases().begin(), field.aliases().end())},
             {"type", v1::FieldType_Name(field.type())},
             {"unit", field.unit()},
             {"cumulative", field.cumulative()},
             {"interval_us", field.interval_us()},
             {"help", field.help()}});
      }
    }
    std::cout << json.dump() << std::endl;
    return kExitOk;
  }
  if (list_fields) {
    Table table({"ID", "NAME", "TYPE", "UNIT", "INTERVAL", "HELP"});
    for (const auto& field : fields->fields()) {
      std::string type = v1::FieldType_Name(field.type()).substr(strlen("FIELD_TYPE_"));
      table.AddRow({std::to_string(field.id()), field.name(), type, field.unit(),
                    absl::FormatDuration(absl::Microseconds(field.interval_us())), field.help()});
    }
    table.Print(std::cout);
    return kExitOk;
  }
  Table table({"engine", (*client)->address()});
  table.AddRow({"node", info->node_name()});
  table.AddRow({"instance_id", info->instance_id()});
  table.AddRow({"version", info->version()});
  table.AddRow({"backend", info->backend()});
  table.AddRow({"started", fmt::format("{} ({})", FormatTimeUs(info->start_time_us()),
                                       Ago(info->start_time_us()))});
  table.AddRow({"seq", fmt::format("{} at {}", info->seq(), FormatTimeUs(info->seq_time_us()))});
  table.AddRow(
      {"tick",
       fmt::format("{} (the latest took {})",
                   absl::FormatDuration(absl::Microseconds(info->tick_interval_us())),
                   absl::FormatDuration(absl::Microseconds(info->last_tick_duration_us())))});
  table.AddRow({"history", absl::FormatDuration(absl::Microseconds(info->history_max_age_us()))});
  table.AddRow({"gpus", std::to_string(info->gpu_count())});
  table.AddRow({"driver", info->driver_version()});
  table.AddRow(
      {"gpu reads failed", fmt::format("{} ({} timed out)", info->counters().gpu_read_failures(),
                                       info->counters().gpu_read_timeouts())});
  table.AddRow({"xid events",
                fmt::format("{} ({} reported by both NVML and the kernel log)",
                            info->counters().xid_events(), info->counters().xid_duplicates())});
  table.AddRow(
      {"kernel log",
       info->counters().kernel_log() == v1::KERNEL_LOG_OFF
           ? "off"
           : fmt::format("{} ({}): {} XID(s), {} for no GPU of this engine, {} "
                         "record(s) overwritten unread",
                         KernelLogStateText(info->counters().kernel_log()),
                         info->counters().kernel_log_source(), info->counters().kernel_log_xids(),
                         info->counters().kernel_log_unknown_gpu(),
                         info->counters().kernel_log_overwritten())});
  table.AddRow(
      {"health state", fmt::format("{} record(s) pending (oldest {:.1f} s), {} failed write(s)",
                                   info->counters().persistence_pending(),
                                   info->counters().persistence_lag_us() / 1e6,
                                   info->counters().persistence_failures())});
  table.Print(std::cout);
  return kExitOk;
}

// The NIC ports and the GPUs each serves, as `ibstat` names ports (HCA/PORT).
void PrintNicPorts(const v1::ListGpusResponse& found) {
  std::cout << "\n"
            << found.nic_ports_size() << " NIC port" << (found.nic_ports_size() == 1 ? "" : "s")
            << " found.\n";
  Table table({"PORT", "LINK", "PCI BUS ID", "NETDEV", "STATE", "RATE", "SERVES"});
  for (const auto& port : found.nic_ports()) {
    std::string state =
        port.state().empty() ? "unknown" : fmt::format("{}/{}", port.state(), port.phys_state());
    // A drill's values say so where they show.
    if (!port.injected().empty()) {
      state += fmt::format(" (injected: {})", fmt::join(port.injected(), ", "));
    }
    std::string rate = "unknown";
    if (port.rate_gbps() > 0) {
      rate = fmt::format("{:g} Gb/s", port.rate_gbps());
      if (port.lanes() > 0) rate += fmt::format(" ({}X {})", port.lanes(), port.speed());
    }
    const std::string serves =
        port.gpus().empty()
            ? "the node"
            : fmt::format("GPU {} ({})", fmt::join(port.gpus(), ", "), port.attachment());
    table.AddRow({port.name(), port.link_layer().empty() ? "unknown" : port.link_layer(),
                  port.pci_bus_id(), port.netdev().empty() ? "-" : port.netdev(), state, rate,
                  serves});
  }
  table.Print(std::cout);
}

int RunDiscovery(const ClientFlags& flags) {
  auto client = ConnectFromFlags(flags);
  if (!client.ok()) return Fail("discovery", client.status());
  auto gpus = (*client)->ListGpus();
  if (!gpus.ok()) return Fail("discovery", gpus.status());
  if (flags.json) {
    nlohmann::json json = {{"instance_id", gpus->instance_id()}, {"gpus", nlohmann::json::array()}};
    for (const auto& gpu : gpus->gpus()) {
      nlohmann::json entry = {{"index", gpu.index()},
                              {"uuid", gpu.uuid()},
                              {"name", gpu.name()},
                              {"pci_bus_id", gpu.pci_bus_id()},
                              {"serial", gpu.serial()},
                              {"memory_total_mib", gpu.memory_total_mib()},
                              {"driver_version", gpu.driver_version()},
                              {"device", gpu.device()},
                              {"mig_mode", gpu.mig_mode()}};
      if (gpu.mig_mode()) {
        entry["mig_instances"] = nlohmann::json::array();
        for (const auto& mig : gpu.mig_instances()) {
          entry["mig_instances"].push_back({{"gpu_instance_id", mig.gpu_instance_id()},
                                            {"compute_instance_id", mig.compute_instance_id()},
                                            {"profile", mig.profile()},
                                            {"uuid", mig.uuid()},
                                            {"placement_start", mig.placement_start()},
                                            {"placement_size", mig.placement_size()},
                                            {"memory_total_mib", mig.memory_total_mib()}});
        }
      }
      json["gpus"].push_back(std::move(entry));
    }
    json["nic_ports"] = nlohmann::json::array();
    for (const auto& port : gpus->nic_ports()) {
      json["nic_ports"].push_back({{"name", port.name()},
                                   {"pci_bus_id", port.pci_bus_id()},
                                   {"link_layer", port.link_layer()},
                                   {"netdev", port.netdev()},
                                   {"gpus", port.gpus()},
                                   {"attachment", port.attachment()},
                                   {"state", port.state()},
                                   {"phys_state", port.phys_state()},
                                   {"rate_gbps", port.rate_gbps()},
                                   {"lanes", port.lanes()},
                                   {"speed", port.speed()},
                                   {"injected", port.injected()}});
    }
    std::cout << json.dump() << std::endl;
    return kExitOk;
  }
  std::cout << gpus->gpus_size() << " GPU" << (gpus->gpus_size() == 1 ? "" : "s") << " found.\n";
  Table table({"GPU", "NAME", "UUID", "PCI BUS ID", "MEMORY", "SERIAL", "DEVICE"});
  for (const auto& gpu : gpus->gpus()) {
    table.AddRow({std::to_string(gpu.index()), gpu.name(), gpu.uuid(), gpu.pci_bus_id(),
                  fmt::format("{} MiB", gpu.memory_total_mib()), gpu.serial(), gpu.device()});
    // Its GPU instances, under it, as `nvidia-smi -L` lists MIG devices: GPU/GI ID.
    for (const auto& mig : gpu.mig_instances()) {
      table.AddRow({fmt::format("  {}/{}", gpu.index(), mig.gpu_instance_id()),
                    "MIG " + mig.profile(), mig.uuid(),
                    fmt::format("slices {}-{}", mig.placement_start(),
                                mig.placement_start() + mig.placement_size() - 1),
                    fmt::format("{} MiB", mig.memory_total_mib()), "", ""});
    }
  }
  table.Print(std::cout);
  if (gpus->nic_ports_size() > 0) PrintNicPorts(*gpus);
  return kExitOk;
}

}  // namespace

CommandRunner AddInfoCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "info", "Show the engine: node, instance_id, version, backend, seq (like `dcgmi -v`)");
  auto flags = std::make_shared<ClientFlags>();
  auto list_fields = std::make_shared<bool>(false);
  AddClientFlags(command, flags.get());
  command->add_flag("--fields", *list_fields,
                    "List the fields the engine samples, with types, units and intervals");
  return [flags, list_fields] { return RunInfo(*flags, *list_fields); };
}

CommandRunner AddDiscoveryCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "discovery", "List the GPUs the engine sees (like `dcgmi discovery -l`)");
  auto flags = std::make_shared<ClientFlags>();
  AddClientFlags(command, flags.get());
  return [flags] { return RunDiscovery(*flags); };
}

}  // namespace vigil::cli
