// `vigil node`: engine + exporter + health check in one process, for single machines, systemd
// and the demo. The exporter and the health check are clients of the in-process engine through a
// channel that bypasses the network, so they see exactly what remote clients see; the engine
// still serves its Unix socket and TCP for the CLI (dmon, inject, health...).
#include "app/engine_setup.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status.h"
#include "exporter/exporter.h"
#include "fmt/format.h"
#include "healthcheck/healthcheck.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {
namespace {

struct NodeFlags {
  EngineFlags engine;
  std::string exporter_listen = ":9400";
  std::string collectors;
  CompatFlags compat;
  std::string healthcheck_listen = ":9401";
  std::string web_config_file;
  bool exporter_metrics = false;
};

// "SCHEME://HOST:PORT" for a listen address and the port it got ("" host: this machine's name).
std::string Url(const std::string& scheme, const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "localhost";
  return fmt::format("{}://{}:{}", scheme, host, port);
}

int RunNode(const NodeFlags& flags) {
  SignalWaiter signals;  // before any thread starts
  if (absl::Status status = InitLogging(flags.engine.log_level); !status.ok()) {
    return Fail("node", WithContext(status, "--log-level"));
  }
  if (flags.exporter_listen.empty() && flags.healthcheck_listen.empty()) {
    return Fail("node",
                "--exporter-listen '' and --healthcheck-listen '' leave only the engine: run "
                "`vigil engine` instead");
  }
  // Checked before the engine starts: a mistake there is one line, and no GPU is opened.
  auto hostname_label = HostnameLabelFromFlags(flags.compat);
  if (!hostname_label.ok()) return Fail("node", hostname_label.status());
  auto web = LoadWebConfigFlag(flags.web_config_file);
  if (!web.ok()) return Fail("node", web.status());
  const std::string scheme = WebScheme(web->get());
  auto engine = RunningEngine::Start(flags.engine);
  if (!engine.ok()) return Fail("node", engine.status());
  auto client = [&engine] {
    return std::make_unique<EngineClient>((*engine)->server().InProcessChannel(), "in-process");
  };
  std::unique_ptr<Exporter> exporter;
  if (!flags.exporter_listen.empty()) {
    auto started = Exporter::Start({.listen = flags.exporter_listen,
                                    .http_guard = web->get(),
                                    .collectors_path = flags.collectors,
                                    .hostname_label = *hostname_label,
                                    .hostname = (*engine)->node_name(),
                                    .exporter_metrics = flags.exporter_metrics},
                                   client());
    if (!started.ok()) return Fail("node", WithContext(started.status(), "--exporter-listen"));
    exporter = std::move(*started);
    spdlog::info("exporter listening on {}/metrics",
                 Url(scheme, flags.exporter_listen, exporter->port()));
  }
  std::unique_ptr<Healthcheck> check;
  if (!flags.healthcheck_listen.empty()) {
    auto started = Healthcheck::Start({.listen = flags.healthcheck_listen,
                                       .http_guard = web->get(),
                                       .node_name = (*engine)->node_name(),
                                       .exporter_metrics = flags.exporter_metrics},
                                      client());
    if (!started.ok()) return Fail("node", WithContext(started.status(), "--healthcheck-listen"));
    check = std::move(*started);
    spdlog::info("healthcheck listening on {}/status",
                 Url(scheme, flags.healthcheck_listen, check->port()));
  }
  signals.WaitForStop(
      [&] {
        if (exporter != nullptr) (void)exporter->ReloadCounters();
      },
      "shutting down");
  // The clients first: they follow the engine's streams, which the engine ends on its way out.
  if (check != nullptr) check->Stop();
  if (exporter != nullptr) exporter->Stop();
  (*engine)->Stop();
  return kExitOk;
}

}  // namespace

CommandRunner AddNodeCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "node",
      "Engine, exporter and health check in one process (single machines, systemd, the demo)");
  auto flags = std::make_shared<NodeFlags>();
  AddEngineFlags(command, &flags->engine);
  command
      ->add_option("--exporter-listen", flags->exporter_listen,
                   "Address of the exporter's /metrics ('' disables the exporter)")
      ->capture_default_str();
  command->add_option("-f,--collectors", flags->collectors,
                      "Exporter counters file in dcgm-exporter's CSV format (default: its "
                      "default list)");
  AddCompatFlags(command, &flags->compat);
  command
      ->add_option("--healthcheck-listen", flags->healthcheck_listen,
                   "Address of the health check's /status ('' disables the health check)")
      ->capture_default_str();
  // One web config for both endpoints: one process, one certificate and one set of users.
  AddWebConfigFlag(command, &flags->web_config_file);
  AddExporterMetricsFlag(command, &flags->exporter_metrics);
  return [flags] { return RunNode(*flags); };
}

}  // namespace vigil::cli
