// Turns SIGTERM, SIGINT (and optionally SIGHUP) into a synchronous wait, so that shutdown runs
// on an ordinary thread instead of inside a signal handler.
// Contract: construct a SignalWaiter in main before starting any other thread; it blocks the
// signals for the whole process (threads inherit the mask), and only Wait() receives them.
#pragma once

#include <csignal>

namespace vigil {

class SignalWaiter {
 public:
  SignalWaiter();
  SignalWaiter(const SignalWaiter&) = delete;
  SignalWaiter& operator=(const SignalWaiter&) = delete;

  // Blocks until SIGTERM, SIGINT or SIGHUP arrives; returns the signal number.
  int Wait();

  // Sends SIGTERM to this process, waking Wait(). Thread-safe; used when a component fails and
  // the process must shut down as if asked to.
  static void RequestShutdown();

 private:
  sigset_t signals_;
};

}  // namespace vigil
