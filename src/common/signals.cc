// Implements SignalWaiter with pthread_sigmask and sigwait.
#include "common/signals.h"

#include <pthread.h>
#include <unistd.h>

#include "common/check.h"

namespace vigil {

SignalWaiter::SignalWaiter() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGHUP);
  VIGIL_CHECK(pthread_sigmask(SIG_BLOCK, &signals_, nullptr) == 0);
  // A client that drops its connection mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);
}

int SignalWaiter::Wait() {
  int signal_number = 0;
  VIGIL_CHECK(sigwait(&signals_, &signal_number) == 0);
  return signal_number;
}

void SignalWaiter::RequestShutdown() { kill(getpid(), SIGTERM); }

}  // namespace vigil
