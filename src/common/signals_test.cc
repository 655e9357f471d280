// Tests SignalWaiter where it matters: a thread started before it (as gRPC starts some before
// main()) has an empty signal mask, and a SIGTERM the kernel hands to that thread must still
// reach Wait() instead of killing the process.
#include "common/signals.h"

#include <signal.h>
#include <unistd.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(SignalWaiterTest, ASignalTakenByAThreadStartedBeforeItStillReachesWait) {
  absl::Notification done;
  std::thread early([&done] { done.WaitForNotification(); });  // signals unblocked here
  SignalWaiter signals;                                        // blocks them on this thread only
  // This thread blocks SIGTERM, so the kernel delivers it to `early`: without a handler, its
  // default action would end the test process here.
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ(signals.Wait(), SIGTERM);
  SignalWaiter::RequestShutdown();
  EXPECT_EQ(signals.Wait(), SIGTERM);
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  EXPECT_EQ(signals.Wait(), SIGHUP);
  done.Notify();
  early.join();
}

}  // namespace
}  // namespace vigil
