// Runs a configured command (a GPU reset, a reboot request) as a child process with a time limit
// and captures what it prints. No shell: the command is an argv, so a value substituted into it
// (a GPU's UUID) cannot become shell syntax.
// Thread-safety: RunSubprocess() is thread-safe and blocks the calling thread until the child
// exits or is killed at the limit; call it from a thread that may wait that long.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vigil {

struct SubprocessResult {
  int exit_code = -1;      // the exit status; 128+N when killed by signal N
  bool timed_out = false;  // killed (SIGKILL) at the limit
  std::string output;      // stdout and stderr together, at most kMaxSubprocessOutput bytes
};

inline constexpr size_t kMaxSubprocessOutput = 64 * 1024;

// Runs argv[0] (found on PATH when it has no '/') with argv, stdin from /dev/null, for at most
// `limit`. A command that runs, whatever its exit status, is a result; InvalidArgument for an
// empty argv, Internal when the process cannot be started (fork failed; a missing program is exit
// code 127 with the reason in its output, as a shell reports it).
absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               absl::Duration limit);

// Splits a configured command line on blanks into an argv and replaces each {name} in it with
// its value from `values` (given as {"name", "value"} pairs). InvalidArgument for an empty
// command, a quote (no quoting: one word is one argument) or an unknown {name}.
absl::StatusOr<std::vector<std::string>> ExpandCommand(
    std::string_view command, const std::vector<std::pair<std::string, std::string>>& values);

// The first line of `output` (or "(no output)"), for one-line log records and errors.
std::string FirstLine(std::string_view output);

}  // namespace vigil
