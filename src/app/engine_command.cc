// `vigil engine`: the host engine daemon. Validates every flag, opens the backend, serves the
// API on the Unix socket and TCP, ticks until SIGTERM/SIGINT, then shuts down cleanly (streams
// ended with UNAVAILABLE, socket file removed, exit 0).
#include "app/engine_setup.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {
namespace {

int RunEngine(const EngineFlags& flags) {
  // Before any thread starts, so that every thread inherits the blocked signals.
  SignalWaiter signals;
  if (absl::Status status = InitLogging(flags.log_level); !status.ok()) {
    return Fail("engine", WithContext(status, "--log-level"));
  }
  auto engine = RunningEngine::Start(flags);
  if (!engine.ok()) return Fail("engine", engine.status());
  signals.WaitForStop(
      [] {
        spdlog::info("SIGHUP: the engine has nothing to reload; restart it to apply a new config");
      },
      "shutting down");
  (*engine)->Stop();
  return kExitOk;
}

}  // namespace

CommandRunner AddEngineCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "engine", "Run the host engine: owns the GPUs, samples, caches and serves clients");
  auto flags = std::make_shared<EngineFlags>();
  AddEngineFlags(command, flags.get());
  return [flags] { return RunEngine(*flags); };
}

}  // namespace vigil::cli
