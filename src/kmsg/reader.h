// Follows the kernel log: /dev/kmsg (a character device: one record per read(), EPIPE when the
// ring buffer overwrote records the reader had not read yet), or a regular file or FIFO in the
// same format (a saved log being replayed, or a test), followed as `tail -f` follows a file. Every
// record goes to the handler, from the start of the log: a fresh open of /dev/kmsg reads the
// ring buffer from its oldest record, which is how XIDs from before the engine started are
// found. A log that is absent or unreadable at start is one WARN line and a state, never an
// error; a log that breaks is reopened with a backoff on the injected clock; one replaced (a new
// inode: a rotated file, a new FIFO) or truncated in place is read again from its start. A FIFO
// is opened for reading and writing, so its feeder may come and go. A line split across writes
// waits for its newline.
// Threads: one of its own (`vigil-kmsg`) after Start(); the handler runs on it. stats() from any
// thread; Start()/Stop() from the owner.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kmsg/log_source.h"
#include "kmsg/record.h"

namespace vigil::kmsg {

struct ReaderOptions {
  std::string path;  // "/dev/kmsg", or a file or FIFO in its format
  // How often a regular file at its end is looked at again (it has no way to wake a reader).
  absl::Duration follow_interval = absl::Milliseconds(100);
  // Called on the reader's thread when it has waited `idle_interval` without a record (for work
  // that must happen while the log is quiet). May be null.
  std::function<void()> on_idle;
  absl::Duration idle_interval = absl::Seconds(1);
  // Reopening after the log ended or failed: 1 s doubling to 30 s.
  absl::Duration reopen_initial = absl::Seconds(1);
  absl::Duration reopen_max = absl::Seconds(30);
  Clock* clock = Clock::Real();
};

class Reader : public LogSource {
 public:
  using Handler = std::function<void(const Record& record)>;

  Reader(ReaderOptions options, Handler handler);
  ~Reader() override;  // Stop()

  // Reads what the log holds now, on the caller's thread, and returns: the handler has seen every
  // record logged so far (a fresh /dev/kmsg starts at the oldest the ring buffer holds). Start()
  // then goes on from there. Call before Start(), at most once.
  void CatchUp() override;
  void Start() override;
  // Wakes the thread (also from a blocking wait) and joins it. Idempotent.
  void Stop() override;
  const ReaderStats& stats() const override { return stats_; }
  std::string description() const override { return options_.path; }

 private:
  void Loop();
  // Opens the log; false (and the state set, logged once per state) when it cannot.
  bool Open();
  enum class FollowEnd { kReopenNow, kBackOff, kCaughtUp };
  // Reads until the log ends or fails or Stop() — or, with `until_caught_up`, until there is
  // nothing more to read for now (the fd stays open). kReopenNow: a replaced file.
  FollowEnd Follow(bool until_caught_up);
  void Deliver(std::string_view text);
  // Waits up to `timeout` (real time) for the fd to be readable or the reader to be stopped;
  // false when stopped.
  bool WaitReadable(absl::Duration timeout);
  // Waits `follow_interval` (real time), or less when Stop() wakes the thread.
  void Nap();
  // Whether the path now names another file than the one open (rotated, a new FIFO).
  bool Replaced() const;
  bool stopping() const;

  const ReaderOptions options_;
  const Handler handler_;
  ReaderStats stats_;
  std::thread thread_;
  int fd_ = -1;
  bool device_ = false;  // a character device: one record per read()
  bool fifo_ = false;
  uint64_t inode_ = 0;
  int wake_[2] = {-1, -1};                   // a pipe: Stop() writes to it to end a poll()
  LogState logged_ = LogState::kNotStarted;  // the last state logged

  mutable absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace vigil::kmsg
