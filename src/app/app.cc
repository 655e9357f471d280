// Builds the `vigil` command tree with CLI11 and turns parse errors into one line and exit 2.
#include "app/app.h"

#include <grpc/grpc.h>

#include <algorithm>
#include <iostream>

#include "absl/synchronization/mutex.h"
#include "app/engine_setup.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/version.h"
#include "fmt/format.h"

namespace vigil::cli {

std::vector<std::pair<std::string, CommandRunner>> AddCommands(CLI::App* app) {
  app->set_version_flag("--version", std::string(kVersion));
  app->require_subcommand(1);
  app->fallthrough(false);
  return {
      {"engine", AddEngineCommand(app)},
      {"exporter", AddExporterCommand(app)},
      {"info", AddInfoCommand(app)},
      {"discovery", AddDiscoveryCommand(app)},
      {"dmon", AddDmonCommand(app)},
      {"inject", AddInjectCommand(app)},
      {"events", AddEventsCommand(app)},
      {"history", AddHistoryCommand(app)},
      {"recordings", AddRecordingsCommand(app)},
      {"report", AddReportCommand(app)},
      {"health", AddHealthCommand(app)},
      {"healthcheck", AddHealthcheckCommand(app)},
      {"drill", AddDrillCommand(app)},
      {"reset-gpu", AddResetGpuCommand(app)},
      {"remediator", AddRemediatorCommand(app)},
      {"node", AddNodeCommand(app)},
  };
}

std::vector<std::string> EmptyValuesMadeExplicit(const CLI::App& app,
                                                 const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size() + 2);
  const CLI::App* command = &app;  // the (sub)command the arguments so far have chosen
  bool positional_only = false;    // after "--"
  for (const std::string& arg : args) {
    if (positional_only || arg == "--") {
      positional_only = true;
      out.push_back(arg);
      continue;
    }
    if (!arg.starts_with("-")) {
      // A subcommand's name descends into it; anything else is a value or a positional.
      const std::vector<const CLI::App*> named =
          command->get_subcommands([&](const CLI::App* sub) { return sub->check_name(arg); });
      if (!named.empty()) command = named.front();
      out.push_back(arg);
      continue;
    }
    const size_t equals = arg.find('=');
    if (!arg.starts_with("--") || equals + 1 != arg.size()) {
      out.push_back(arg);
      continue;
    }
    const std::string name = arg.substr(0, equals);
    const CLI::Option* option = command->get_option_no_throw(name);
    if (option == nullptr || option->get_items_expected_max() == 0) {  // unknown, or a flag
      out.push_back(arg);
      continue;
    }
    out.push_back(name);
    out.emplace_back();
  }
  return out;
}

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
  const std::vector<std::pair<std::string, CommandRunner>> commands = AddCommands(&app);
  try {
    std::vector<std::string> args = EmptyValuesMadeExplicit(
        app, std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
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
