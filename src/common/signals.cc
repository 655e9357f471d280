// Implements SignalWaiter: a handler for SIGTERM, SIGINT and SIGHUP that writes the signal's
// number to a pipe, which Wait() reads.
//
// Why not only block the signals and sigwait(): threads started before main() — gRPC's static
// initialisation starts some — keep an empty signal mask, so the kernel may deliver SIGTERM to
// one of them, where its default action kills the process (seen: `vigil node` exiting 143 when
// stopped during start-up). A handler runs on whichever thread gets the signal. The signals are
// still blocked on the constructing thread and so on every thread it starts, which keeps them
// from interrupting Vigil's own system calls.
#include "common/signals.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

#include "common/check.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

// The pipe the handler writes to; set once by the first SignalWaiter, never closed (the handler
// may run at any moment until the process exits).
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int signal_number) {
  const int saved_errno = errno;
  const char byte = static_cast<char>(signal_number);
  // Async-signal-safe. A full pipe (a storm of signals nobody reads) drops the extra ones.
  [[maybe_unused]] const ssize_t written = write(g_signal_pipe[1], &byte, 1);
  errno = saved_errno;
}

}  // namespace

SignalWaiter::SignalWaiter() {
  if (g_signal_pipe[0] < 0) {
    VIGIL_CHECK(pipe2(g_signal_pipe, O_CLOEXEC) == 0);
    VIGIL_CHECK(fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK) == 0);
  }
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGHUP);
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  action.sa_mask = signals_;  // one handler at a time
  action.sa_flags = SA_RESTART;
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP}) {
    VIGIL_CHECK(sigaction(signal_number, &action, nullptr) == 0);
  }
  VIGIL_CHECK(pthread_sigmask(SIG_BLOCK, &signals_, nullptr) == 0);
  // A client that drops its connection mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);
}

int SignalWaiter::Wait() {
  // The constructing thread blocks the signals; let them in here so that one sent while this
  // thread waits may also be handled on it.
  VIGIL_CHECK(pthread_sigmask(SIG_UNBLOCK, &signals_, nullptr) == 0);
  char byte = 0;
  ssize_t got;
  while ((got = read(g_signal_pipe[0], &byte, 1)) < 0 && errno == EINTR) {
  }
  VIGIL_CHECK(got == 1);
  VIGIL_CHECK(pthread_sigmask(SIG_BLOCK, &signals_, nullptr) == 0);
  return static_cast<unsigned char>(byte);
}

int SignalWaiter::WaitForStop(const std::function<void()>& on_hangup, std::string_view what) {
  int signal_number;
  while ((signal_number = Wait()) == SIGHUP) on_hangup();
  spdlog::info("{}: {}", strsignal(signal_number), what);
  return signal_number;
}

void SignalWaiter::RequestShutdown() { kill(getpid(), SIGTERM); }

}  // namespace vigil
