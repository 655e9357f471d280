// Runs the real `vigil` binary from end-to-end tests: as a background process (an engine) or as
// a command to completion (a CLI call), capturing stdout and stderr to files.
// Not thread-safe: owned by one test.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "testing/eventually.h"
#include "testing/paths.h"

namespace vigil::testing {

struct CommandResult {
  int exit_code = -1;  // -1: killed after the timeout
  std::string out;
  std::string err;
};

// Runs `args` (args[0] is the program) to completion, or kills it after `timeout`. With `uid`
// >= 0 the command runs as that user (and its own group); the test must run as root.
CommandResult RunCommand(const std::vector<std::string>& args,
                         absl::Duration timeout = absl::Seconds(20), int uid = -1);

// Runs `command` with /bin/sh -c, like RunCommand: for pipes, redirections and programs found
// on PATH (RunCommand execs a path).
CommandResult Shell(const std::string& command, absl::Duration timeout = absl::Seconds(60));

// Runs the vigil binary with `args` (without the program name), like RunCommand.
CommandResult Vigil(std::vector<std::string> args, int uid = -1);

// Runs vigil with `args` and parses its standard output as one JSON document (discarded, not
// thrown, when it is not JSON: the caller's checks then fail on it).
nlohmann::json VigilJson(const std::vector<std::string>& args);

// Parses JSON Lines output (`--json` streams): one document per non-empty line.
std::vector<nlohmann::json> JsonLines(const std::string& text);

class Process {
 public:
  // Starts `args`; stdout and stderr go to files in `dir`. `uid` >= 0: as that user.
  Process(const std::vector<std::string>& args, const std::string& dir, int uid = -1);
  ~Process();  // SIGKILLs the process if still running

  pid_t pid() const { return pid_; }
  // Waits until stderr contains `text` (true) or the timeout passes or the process exits.
  bool WaitForStderr(const std::string& text, absl::Duration timeout = absl::Seconds(20));
  std::string Stderr() const;
  std::string Stdout() const;
  void Signal(int signal_number);
  // Waits for exit; returns the exit code, 128+signal if killed by one, -1 on timeout.
  int Wait(absl::Duration timeout = absl::Seconds(20));

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  std::string out_path_, err_path_;
};

// A TCP port on 127.0.0.1 below the ephemeral range that was free a moment ago, for
// servers that cannot report the port they picked themselves.
int FreePort();

// Starts `vigil engine --backend sim` (or other backend arguments) on a socket in `dir` and an
// ephemeral TCP port (unless `extra` has a --listen), and waits until it is ready. `extra` args
// are appended.
struct EngineProcess {
  EngineProcess(const std::string& dir, const std::string& node_name, uint32_t gpus,
                const std::vector<std::string>& extra = {});
  // The same with other backend arguments (e.g. {"--backend", "nvml", "--nvml-library", path}).
  EngineProcess(const std::string& dir, const std::string& node_name,
                const std::vector<std::string>& backend_args,
                const std::vector<std::string>& extra);
  std::string socket_path;
  std::string unix_address;  // "unix:///..."
  std::string tcp_address;   // "127.0.0.1:PORT"
  std::unique_ptr<Process> process;
};

}  // namespace vigil::testing
