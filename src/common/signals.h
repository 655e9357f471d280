// Turns SIGTERM, SIGINT and SIGHUP into a synchronous wait, so that shutdown runs on an ordinary
// thread instead of inside a signal handler.
// Contract: construct a SignalWaiter early in the command (before starting threads of its own);
// from then on those signals no longer have their default action anywhere in the process, and
// Wait() returns them one by one, in order, including any that arrived before it was called.
#pragma once

#include <csignal>
#include <functional>
#include <string_view>

namespace vigil {

class SignalWaiter {
 public:
  SignalWaiter();
  SignalWaiter(const SignalWaiter&) = delete;
  SignalWaiter& operator=(const SignalWaiter&) = delete;

  // Blocks until SIGTERM, SIGINT or SIGHUP arrives; returns the signal number.
  int Wait();
  // Blocks until SIGTERM or SIGINT arrives and returns it; each SIGHUP on the way runs
  // `on_hangup` (a daemon's reload) on this thread. Logs "<signal>: <what>" before returning.
  int WaitForStop(const std::function<void()>& on_hangup, std::string_view what);

  // Sends SIGTERM to this process, waking Wait(). Thread-safe; used when a component fails and
  // the process must shut down as if asked to.
  static void RequestShutdown();

 private:
  sigset_t signals_;
};

}  // namespace vigil
