// `vigil reset-gpu --gpu N`: asks the node's engine to reset one GPU (what `nvidia-smi
// --gpu-reset` does), once no compute process uses it; privileged and audited by the engine like
// injection. Waits for the reset, then for the next verdict, and prints both. Exit 0 reset, 1
// refused or failed (in use, lost, another reset running, the command failed), 2 usage or
// connection.
// Single-threaded: runs on main's thread.
#include <iostream>

#include "absl/strings/str_join.h"
#include "api/convert.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/subprocess.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace vigil::cli {
namespace {

struct ResetGpuFlags {
  ClientFlags client;
  int64_t gpu = -1;
  std::string uuid;
  std::string reason;
};

int RunResetGpu(const ResetGpuFlags& flags) {
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("reset-gpu", client.status());
  auto before = (*client)->GetEngineInfo();
  if (!before.ok()) return Fail("reset-gpu", before.status());
  v1::ResetGpuRequest request;
  request.set_gpu(static_cast<uint32_t>(flags.gpu));
  request.set_uuid(flags.uuid);
  request.set_reason(flags.reason.empty() ? "vigil reset-gpu" : flags.reason);
  auto reset = (*client)->ResetGpu(request);
  if (!reset.ok()) {
    const absl::StatusCode code = reset.status().code();
    const int exit_code = Fail("reset-gpu", reset.status());
    // The engine refused (in use, lost, another reset) or the reset failed: 1, as for a failed
    // check; usage, connection and permission problems stay 2.
    return code == absl::StatusCode::kFailedPrecondition || code == absl::StatusCode::kAborted ||
                   code == absl::StatusCode::kInternal || code == absl::StatusCode::kNotFound
               ? 1
               : exit_code;
  }
  v1::GetHealthRequest health_request;
  health_request.add_gpus(reset->gpu());
  auto verdict = VerdictAfter(**client, *before, health_request);
  if (!verdict.ok()) return Fail("reset-gpu", verdict.status());
  const v1::HealthStatus status =
      verdict->gpus_size() == 1 ? verdict->gpus(0).status() : v1::HEALTH_STATUS_UNKNOWN;
  if (flags.client.json) {
    nlohmann::json json = {{"gpu", reset->gpu()},
                           {"uuid", reset->uuid()},
                           {"duration_us", reset->duration_us()},
                           {"output", reset->output()},
                           {"injections_cleared", nlohmann::json::array()},
                           {"status", std::string(HealthStatusText(status))},
                           {"seq", verdict->seq()}};
    for (const std::string& id : reset->injections_cleared()) {
      json["injections_cleared"].push_back(id);
    }
    std::cout << json.dump() << std::endl;
    return kExitOk;
  }
  std::cout << fmt::format("GPU {} ({}) reset in {}: {}\n", reset->gpu(), reset->uuid(),
                           absl::FormatDuration(absl::Microseconds(reset->duration_us())),
                           FirstLine(reset->output()));
  if (reset->injections_cleared_size() > 0) {
    std::cout << fmt::format("Injections ended by the reset: {}\n",
                             absl::StrJoin(reset->injections_cleared(), ", "));
  }
  std::cout << fmt::format(
      "GPU {} is now {} (seq {}); the reset clears its sticky failures once the engine reads it.\n",
      reset->gpu(), HealthStatusText(status), verdict->seq());
  return kExitOk;
}

}  // namespace

CommandRunner AddResetGpuCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "reset-gpu",
      "Reset one GPU through the node's engine once no compute process uses it (privileged, "
      "audited; like `nvidia-smi --gpu-reset`)");
  auto flags = std::make_shared<ResetGpuFlags>();
  flags->client.timeout = "3m";  // the engine's reset command may take up to its 2-minute limit
  AddClientFlags(command, &flags->client);
  AddTokenFileFlag(command, &flags->client);
  command->add_option("--gpu", flags->gpu, "GPU index")->required()->check(CLI::Range(0, 1023));
  command->add_option("--uuid", flags->uuid,
                      "Reset only if GPU --gpu has this UUID (a guard against index changes)");
  command->add_option("--reason", flags->reason, "Why, for the engine's audit record");
  return [flags] { return RunResetGpu(*flags); };
}

}  // namespace vigil::cli
