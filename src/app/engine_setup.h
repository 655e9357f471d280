// The engine as the daemon commands run it (`vigil engine`, `vigil node`): its flags, and an
// engine started from them — backend opened, API served on the Unix socket and TCP, ticking.
// Thread-safety: owned by the command's main thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "backend/nvml_backend.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/tick_loop.h"
#include "kmsg/kernel_log_xids.h"
#include "recorder/flight_recorder.h"
#include "server/server.h"
#include "tls/credentials.h"

namespace vigil::cli {

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
  // The TCP listener's TLS (tls/credentials.h): cert and key, and a client CA for mutual TLS.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string tls_reload_interval = absl::FormatDuration(tls::kDefaultReloadInterval);
  // Accept the injection token over plain TCP (server/authz.h).
  bool insecure_token_over_plaintext = false;
  std::string log_level = "info";
  // The kernel log to read XIDs from; unset: /dev/kmsg with --backend nvml, none with sim.
  std::optional<std::string> kmsg;
  // The systemd journal's directory, read when the kernel log cannot be opened; unset:
  // /var/log/journal with --backend nvml, none with sim.
  std::optional<std::string> journal;
  // The sysfs mount the NIC ports are read from; unset: /sys with --backend nvml, none with sim.
  std::optional<std::string> sysfs_root;
  // --backend sim: NIC rails of the simulated node, one per GPU from GPU 0 (0: none), written as a
  // sysfs tree under STATE_DIR/sim-sysfs that the network source reads.
  uint32_t sim_nics = 0;
  // How the nvml backend resets a GPU (vigil reset-gpu, the remediator's reset-gpu action).
  std::string gpu_reset_command = NvmlResetOptions().command;
  std::string gpu_reset_timeout = absl::FormatDuration(NvmlResetOptions().limit);
  // --backend sim: the MIG layouts, "GPU:PROFILE[,PROFILE…]" each.
  std::vector<std::string> mig;
  CLI::Option* mig_option = nullptr;
  // --backend sim: compute processes that start and end, "GPU[/GI]:PID:MIB[:SM][@START[-END]]".
  std::vector<std::string> sim_processes;
  // Set by CLI11 when given, to refuse sim-only flags with --backend nvml.
  CLI::Option* gpus_option = nullptr;
  CLI::Option* seed_option = nullptr;
};

// Registers the engine's flags (--backend, --gpus, --seed, --socket, --listen, --node-name,
// --state-dir, --config, --nvml-library, --inject-token-file, --tls-cert, --tls-key,
// --tls-client-ca, --tls-reload-interval, --insecure-token-over-plaintext, --kmsg, --journal,
// --gpu-reset-command, --gpu-reset-timeout, --sysfs-root, --sim-nics, --log-level) on `command`.
void AddEngineFlags(CLI::App* command, EngineFlags* flags);

// `vigil engine` and `vigil node`, the commands that host an engine in this process (see
// cli/commands.h for the contract of an Add*Command).
CommandRunner AddEngineCommand(CLI::App* parent);
CommandRunner AddNodeCommand(CLI::App* parent);

class RunningEngine {
 public:
  // Validates every flag, opens the backend and starts serving and ticking; logs "engine ready"
  // with where it listens. Logging must be set up already.
  static absl::StatusOr<std::unique_ptr<RunningEngine>> Start(const EngineFlags& flags);
  ~RunningEngine();

  // Stops ticking, ends the streams with UNAVAILABLE (waiting up to 2 s for calls in flight),
  // removes the socket file. Idempotent.
  void Stop();
  Engine& engine() { return *engine_; }
  EngineServer& server() { return *server_; }
  const std::string& node_name() const { return node_name_; }

 private:
  RunningEngine() = default;
  std::string node_name_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<kmsg::KernelLogXids> kernel_log_;  // null with --kmsg ''
  std::unique_ptr<EngineServer> server_;
  std::unique_ptr<TickLoop> loop_;
  std::unique_ptr<FlightRecorder> recorder_;  // null without a state dir or with no recordings
};

}  // namespace vigil::cli
