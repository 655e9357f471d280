// `vigil engine`: the host engine daemon. Validates every flag, opens the backend, serves the
// API on the Unix socket and TCP, ticks until SIGTERM/SIGINT, then shuts down cleanly (streams
// ended with UNAVAILABLE, socket file removed, exit 0).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "backend/nvml_loader.h"
#include "backend/sim_backend.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status.h"
#include "engine/authz.h"
#include "engine/config.h"
#include "engine/engine.h"
#include "engine/server.h"
#include "engine/tick_loop.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil::cli {
namespace {

struct EngineFlags {
  std::string backend = "nvml";
  uint32_t gpus = 8;
  uint64_t seed = 1;
  std::string socket = "/run/vigil/vigil.sock";
  std::string listen = "127.0.0.1:5555";
  std::string node_name;
  std::string state_dir = "/var/lib/vigil";
  std::string config_path;
  std::string nvml_library;
  std::string inject_token_file;
  std::string log_level = "info";
  // Set by CLI11 when given, to refuse sim-only flags with --backend nvml.
  CLI::Option* gpus_option = nullptr;
  CLI::Option* seed_option = nullptr;
};

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

absl::StatusOr<std::unique_ptr<Backend>> OpenBackend(const EngineFlags& flags) {
  if (flags.backend == "sim") {
    auto sim = SimBackend::Create({.gpu_count = flags.gpus, .seed = flags.seed});
    if (!sim.ok()) return sim.status();
    return std::unique_ptr<Backend>(std::move(*sim));
  }
  if (flags.gpus_option->count() > 0 || flags.seed_option->count() > 0) {
    return absl::InvalidArgumentError("--gpus and --seed apply to --backend sim only");
  }
  auto nvml = OpenNvml(flags.nvml_library);
  if (!nvml.ok()) return nvml.status();
  return absl::UnimplementedError(fmt::format(
      "NVML found {} GPU(s), but this build of vigil cannot sample real GPUs yet (the nvml "
      "backend's sampling is not implemented); use --backend sim",
      (*nvml)->device_count()));
}

int RunEngine(const EngineFlags& flags) {
  // Before any thread starts, so that every thread inherits the blocked signals.
  SignalWaiter signals;
  if (absl::Status status = InitLogging(flags.log_level); !status.ok()) {
    return Fail("engine", WithContext(status, "--log-level"));
  }
  const std::string node_name = flags.node_name.empty() ? DefaultNodeName() : flags.node_name;
  if (absl::Status status = CheckNodeName(node_name); !status.ok()) return Fail("engine", status);
  if (flags.socket.empty() && flags.listen.empty()) {
    return Fail("engine", "--socket '' and --listen '' leave no way to reach the engine");
  }
  EngineConfig config;
  if (!flags.config_path.empty()) {
    auto loaded = LoadEngineConfig(flags.config_path);
    if (!loaded.ok()) return Fail("engine", loaded.status());
    config = *loaded;
  }
  if (absl::Status status = PrepareStateDir(flags.state_dir); !status.ok()) {
    return Fail("engine", status);
  }
  std::string inject_token;
  if (!flags.inject_token_file.empty()) {
    auto token = ReadTokenFile(flags.inject_token_file);
    if (!token.ok()) return Fail("engine", WithContext(token.status(), "--inject-token-file"));
    inject_token = *token;
  }
  auto backend = OpenBackend(flags);
  if (!backend.ok()) return Fail("engine", backend.status());
  const size_t gpu_count = (*backend)->gpus().size();
  auto engine = Engine::Create({.node_name = node_name,
                                .config = config,
                                .state_dir = flags.state_dir,
                                .boot_id = CurrentBootId()},
                               std::move(*backend));
  if (!engine.ok()) return Fail("engine", engine.status());
  auto server = EngineServer::Start(engine->get(), {.unix_socket_path = flags.socket,
                                                    .tcp_address = flags.listen,
                                                    .inject_token = inject_token});
  if (!server.ok()) return Fail("engine", server.status());
  TickLoop loop(engine->get(), config.tick_interval);
  loop.Start();
  const std::string tcp =
      flags.listen.empty() ? "off"
                           : fmt::format("{}:{}", flags.listen.substr(0, flags.listen.rfind(':')),
                                         (*server)->tcp_port());
  spdlog::info(
      "engine ready: node={} instance_id={} backend={} gpus={} unix={} tcp={} tick={} "
      "history={} version={}",
      node_name, (*engine)->identity().instance_id, (*engine)->identity().backend, gpu_count,
      flags.socket.empty() ? "off" : flags.socket, tcp, absl::FormatDuration(config.tick_interval),
      absl::FormatDuration(config.history_max_age), (*engine)->identity().version);

  spdlog::info(
      "injection: over the Unix socket for root{}; over TCP {}; active injections are "
      "not persisted across restarts",
      config.injection_allowed_uids.empty()
          ? ""
          : fmt::format(" and {} more uid(s)", config.injection_allowed_uids.size()),
      inject_token.empty() ? "off (no --inject-token-file)" : "with the token");
  int signal_number;
  while ((signal_number = signals.Wait()) == SIGHUP) {
    spdlog::info("SIGHUP: the engine has nothing to reload; restart it to apply a new config");
  }
  spdlog::info("{}: shutting down", strsignal(signal_number));
  loop.Stop();
  (*server)->Shutdown(absl::Seconds(2));
  server->reset();
  engine->reset();
  spdlog::info("engine stopped");
  return kExitOk;
}

}  // namespace

CommandRunner AddEngineCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "engine", "Run the host engine: owns the GPUs, samples, caches and serves clients");
  auto flags = std::make_shared<EngineFlags>();
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
                      "Token that allows injection over TCP (off without it)");
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  return [flags] { return RunEngine(*flags); };
}

}  // namespace vigil::cli
