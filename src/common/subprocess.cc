// Child processes with a limit: see subprocess.h.
#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "fmt/format.h"

namespace vigil {
namespace {

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               absl::Duration limit) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("no command to run");
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(fmt::format("cannot run {}: pipe: {}", argv[0], strerror(errno)));
  }
  const absl::Time start = absl::Now();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::InternalError(fmt::format("cannot run {}: fork: {}", argv[0], strerror(error)));
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec (no strerror, no allocation).
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    setpgid(0, 0);  // its own group, so the limit kills what it started too
    execvp(args[0], args.data());
    const int error = errno;
    const char* reason = error == ENOENT    ? "No such file or directory"
                         : error == EACCES  ? "Permission denied"
                         : error == ENOEXEC ? "Exec format error"
                                            : "cannot execute";
    (void)!write(STDERR_FILENO, args[0], strlen(args[0]));
    (void)!write(STDERR_FILENO, ": ", 2);
    (void)!write(STDERR_FILENO, reason, strlen(reason));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  close(pipe_fds[1]);
  SubprocessResult result;
  const absl::Time deadline = start + limit;
  char buffer[4096];
  const auto take = [&](ssize_t got) {
    const size_t room = kMaxSubprocessOutput - result.output.size();
    result.output.append(buffer, std::min(room, static_cast<size_t>(got)));
  };
  // Until the child exits (not until its output closes: something it started in the background
  // may keep the pipe open), reading what it prints; at the limit its whole group is killed.
  int status = 0;
  bool exited = false, open_pipe = true;
  while (!exited) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (open_pipe) {
      pollfd fd{.fd = pipe_fds[0], .events = POLLIN, .revents = 0};
      const int wait_ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left), 50));
      if (poll(&fd, 1, wait_ms) > 0) {
        const ssize_t got = read(pipe_fds[0], buffer, sizeof(buffer));
        if (got > 0) {
          take(got);
        } else if (got == 0 || errno != EINTR) {
          open_pipe = false;  // every writer closed its end
        }
      }
    } else {
      absl::SleepFor(absl::Milliseconds(5));
    }
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      exited = true;
    } else if (done < 0 && errno != EINTR) {
      close(pipe_fds[0]);
      return absl::InternalError(fmt::format("cannot wait for {}: {}", argv[0], strerror(errno)));
    }
  }
  // What it printed before it exited and is still in the pipe.
  fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  for (ssize_t got; open_pipe && (got = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) take(got);
  close(pipe_fds[0]);
  result.exit_code = DecodeWaitStatus(status);
  return result;
}

absl::StatusOr<std::vector<std::string>> ExpandCommand(
    std::string_view command, const std::vector<std::pair<std::string, std::string>>& values) {
  if (command.find_first_of("'\"") != std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format(
        "command '{}' has a quote: it is split on blanks, one word per argument, with no "
        "quoting; put anything more in a script and give its path",
        command));
  }
  std::vector<std::string> argv;
  const absl::string_view text(command.data(), command.size());
  for (absl::string_view piece : absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
    const std::string_view word(piece.data(), piece.size());
    std::string expanded;
    for (size_t i = 0; i < word.size();) {
      if (word[i] != '{') {
        expanded += word[i++];
        continue;
      }
      const size_t close = word.find('}', i);
      if (close == std::string_view::npos) {
        return absl::InvalidArgumentError(
            fmt::format("command '{}': '{{' without '}}' in '{}'", command, word));
      }
      const std::string_view name = word.substr(i + 1, close - i - 1);
      const auto it = std::find_if(values.begin(), values.end(),
                                   [&](const auto& value) { return value.first == name; });
      if (it == values.end()) {
        std::string known;
        for (const auto& value : values) known += (known.empty() ? "{" : ", {") + value.first + "}";
        return absl::InvalidArgumentError(fmt::format(
            "command '{}': unknown placeholder {{{}}}; it may use {}", command, name, known));
      }
      expanded += it->second;
      i = close + 1;
    }
    argv.push_back(std::move(expanded));
  }
  if (argv.empty()) return absl::InvalidArgumentError("the command is empty");
  return argv;
}

std::string FirstLine(std::string_view output) {
  while (!output.empty() && (output.front() == '\n' || output.front() == ' ')) {
    output.remove_prefix(1);
  }
  const std::string_view line = output.substr(0, output.find('\n'));
  return line.empty() ? "(no output)" : std::string(line);
}

}  // namespace vigil
