// Builds the `vigil` command tree with CLI11 and turns parse errors into one line and exit 2.
#include "app/app.h"

#include <grpc/grpc.h>

#include <iostream>

#include "absl/synchronization/mutex.h"
#include "app/engine_setup.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/version.h"
#include "fmt/format.h"

namespace vigil::cli {

int Main(int argc, char** argv) {
  // Initialised once and never shut down: gRPC's final cleanup can block after a client dropped
  // mid-stream (shared notes/build.md).
  grpc_init();
  // Debian's abseil records a stack trace per lock acquisition for deadlock detection; the tests
  // keep that check on, the shipped binary does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  CLI::App app(
      "Vigil: one GPU telemetry and health engine per node, and the clients that read "
      "from it.",
      "vigil");
  app.set_version_flag("--version", std::string(kVersion));
  app.require_subcommand(1);
  app.fallthrough(false);
  const std::vector<std::pair<std::string, CommandRunner>> commands = {
      {"engine", AddEngineCommand(&app)},
      {"exporter", AddExporterCommand(&app)},
      {"info", AddInfoCommand(&app)},
      {"discovery", AddDiscoveryCommand(&app)},
      {"dmon", AddDmonCommand(&app)},
      {"inject", AddInjectCommand(&app)},
      {"events", AddEventsCommand(&app)},
      {"history", AddHistoryCommand(&app)},
      {"recordings", AddRecordingsCommand(&app)},
      {"report", AddReportCommand(&app)},
      {"health", AddHealthCommand(&app)},
      {"healthcheck", AddHealthcheckCommand(&app)},
      {"drill", AddDrillCommand(&app)},
      {"reset-gpu", AddResetGpuCommand(&app)},
      {"remediator", AddRemediatorCommand(&app)},
      {"node", AddNodeCommand(&app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help, --version
    std::string command;
    for (const CLI::App* sub : app.get_subcommands()) command = sub->get_name();
    std::string message = error.what();
    if (!message.empty() && message.back() == '\n') message.pop_back();
    return Fail(command.empty() ? "" : command, fmt::format("{} (see `vigil {}--help`)", message,
                                                            command.empty() ? "" : command + " "));
  }
  for (const auto& [name, run] : commands) {
    if (app.got_subcommand(name)) return run();
  }
  return Fail("", "no command given (see `vigil --help`)");
}

}  // namespace vigil::cli
