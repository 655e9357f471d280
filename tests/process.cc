// Implements the test process helpers with fork/exec and waitpid.
#include "process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <sstream>

#include "absl/time/clock.h"
#include "common/check.h"

namespace vigil::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err,
            int uid) {
  // Everything the child needs is made before fork(): between fork and exec a child of a
  // multi-threaded process may only make async-signal-safe calls — an allocation there can
  // deadlock on an allocator lock another thread held at the fork (under ASan it did: the child
  // never reached exec).
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  VIGIL_CHECK(pid >= 0);
  if (pid == 0) {
    const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    const int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, 0);
    if (uid >= 0 && (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) {
      _exit(126);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& args, absl::Duration timeout, int uid) {
  char dir[] = "/tmp/vc.XXXXXX";
  VIGIL_CHECK(mkdtemp(dir) != nullptr);
  CommandResult result;
  {
    Process process(args, dir, uid);
    result.exit_code = process.Wait(timeout);
    result.out = process.Stdout();
    result.err = process.Stderr();
  }
  std::string cleanup = std::string("rm -rf ") + dir;
  VIGIL_CHECK(std::system(cleanup.c_str()) == 0);
  return result;
}

Process::Process(const std::vector<std::string>& args, const std::string& dir, int uid) {
  static int counter = 0;
  const std::string stem = dir + "/p" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  out_path_ = stem + ".out";
  err_path_ = stem + ".err";
  pid_ = Spawn(args, out_path_, err_path_, uid);
}

Process::~Process() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool Process::WaitForStderr(const std::string& text, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Stderr().find(text) != std::string::npos) return true;
    int status = 0;
    if (!exited_ && waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = DecodeStatus(status);
    }
    if (exited_) return Stderr().find(text) != std::string::npos;
    absl::SleepFor(absl::Milliseconds(10));  // polling a file another process writes
  }
  return false;
}

std::string Process::Stderr() const { return ReadAll(err_path_); }
std::string Process::Stdout() const { return ReadAll(out_path_); }

void Process::Signal(int signal_number) {
  if (!exited_) kill(pid_, signal_number);
}

int Process::Wait(absl::Duration timeout) {
  if (exited_) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = DecodeStatus(status);
      return exit_code_;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return -1;
}

int FreePort() {
  // Below the kernel's ephemeral range (32768 and up by default): a port the kernel hands out to
  // a client's connection or to another bind to port 0 cannot take this one before the server
  // under test binds it.
  static std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  std::uniform_int_distribution<int> below_ephemeral(10000, 32767);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    VIGIL_CHECK(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int port = below_ephemeral(random);
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (free) return port;
  }
  VIGIL_CHECK(false && "no free TCP port on 127.0.0.1 between 10000 and 32767");
  return -1;
}

CommandResult Shell(const std::string& command, absl::Duration timeout) {
  return RunCommand({"/bin/sh", "-c", command}, timeout);
}

CommandResult Vigil(std::vector<std::string> args, int uid) {
  args.insert(args.begin(), VigilBinary());
  return RunCommand(args, absl::Seconds(20), uid);
}

nlohmann::json VigilJson(const std::vector<std::string>& args) {
  return nlohmann::json::parse(Vigil(args).out, nullptr, /*allow_exceptions=*/false);
}

std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

EngineProcess::EngineProcess(const std::string& dir, const std::string& node_name, uint32_t gpus,
                             const std::vector<std::string>& extra)
    : EngineProcess(dir, node_name, {"--backend", "sim", "--gpus", std::to_string(gpus)}, extra) {}

EngineProcess::EngineProcess(const std::string& dir, const std::string& node_name,
                             const std::vector<std::string>& backend_args,
                             const std::vector<std::string>& extra) {
  socket_path = dir + "/" + node_name + ".sock";
  unix_address = "unix://" + socket_path;
  std::vector<std::string> args = {VigilBinary(), "engine"};
  args.insert(args.end(), backend_args.begin(), backend_args.end());
  const bool listen_given = std::find(extra.begin(), extra.end(), "--listen") != extra.end();
  for (const std::string& arg :
       {std::string("--socket"), socket_path, std::string("--node-name"), node_name,
        std::string("--state-dir"), dir + "/state-" + node_name}) {
    args.push_back(arg);
  }
  if (!listen_given) args.insert(args.end(), {"--listen", "127.0.0.1:0"});
  args.insert(args.end(), extra.begin(), extra.end());
  process = std::make_unique<Process>(args, dir);
  if (!process->WaitForStderr("engine ready")) return;
  std::smatch match;
  const std::string log = process->Stderr();
  if (std::regex_search(log, match, std::regex("tcp=(127\\.0\\.0\\.1:[0-9]+)"))) {
    tcp_address = match[1];
  }
}

}  // namespace vigil::testing
