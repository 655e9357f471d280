// Implements InitLogging: stderr sink, one format, gRPC core logs forwarded at warning and above.
#include "common/logging.h"

#include <grpc/support/log.h>

#include <string>

#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

// gRPC core calls this from its own threads; spdlog's default logger is thread-safe.
void ForwardGrpcLog(gpr_log_func_args* args) {
  const auto level = args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
                     : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                               : spdlog::level::debug;
  spdlog::log(level, "grpc: {}", args->message);
}

}  // namespace

absl::Status InitLogging(std::string_view level_name) {
  const spdlog::level::level_enum level = spdlog::level::from_str(std::string(level_name));
  // from_str maps anything unknown to "off"; only accept "off" when it was asked for.
  if (level == spdlog::level::off && level_name != "off") {
    return absl::InvalidArgumentError("unknown log level '" + std::string(level_name) +
                                      "': use one of trace, debug, info, warn, error, off");
  }
  auto logger = spdlog::stderr_logger_mt("vigil");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  logger->set_level(level);
  spdlog::set_default_logger(logger);
  gpr_set_log_function(ForwardGrpcLog);
  gpr_set_log_verbosity(level <= spdlog::level::debug ? GPR_LOG_SEVERITY_INFO
                                                      : GPR_LOG_SEVERITY_ERROR);
  return absl::OkStatus();
}

}  // namespace vigil
