// Follows the kernel's messages in the systemd journal, for nodes where /dev/kmsg cannot be
// opened (a container under runc's default device rules): journald copies every /dev/kmsg record
// into the journal (journald-kmsg.c: `_TRANSPORT=kernel`, `SYSLOG_FACILITY`, `PRIORITY`,
// `_SOURCE_MONOTONIC_TIMESTAMP` the record's timestamp, `MESSAGE` unescaped), and the journal's
// directory can be mounted read-only. Each entry of this boot (`_BOOT_ID`) with
// `_TRANSPORT=kernel` becomes a kmsg Record: facility, level and timestamp as the kernel gave
// them, the message, and as its sequence the journal's own sequence number (the `i=` of its
// cursor, increasing within a journal), which the XID source's replay state keeps.
// NVSentinel's syslog monitor reads the same entries (`_TRANSPORT=kernel`).
//
// Threads: libsystemd's journal object must live and die on one thread (sd-journal(3)), so
// everything happens on the reader's own thread (`vigil-journal`): CatchUp() starts it and waits
// until it has delivered what the journal holds now (or found it cannot open it); Start() lets it
// follow. The handler runs on that thread. stats() from any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kmsg/log_source.h"
#include "kmsg/record.h"

namespace vigil::kmsg {

struct JournalReaderOptions {
  // The journal's directory (its machine-id subdirectories are read too): /var/log/journal,
  // or /run/log/journal where the journal is not persistent.
  std::string directory;
  // This boot's id (/proc/sys/kernel/random/boot_id, with or without dashes): the journal keeps
  // earlier boots' messages, which are not this boot's XIDs. "" reads every boot's.
  std::string boot_id;
  // Called on the reader's thread when it has waited `idle_interval` without an entry.
  std::function<void()> on_idle;
  absl::Duration idle_interval = absl::Seconds(1);
  // How long one wait for new entries lasts at most (bounds how long Stop() takes).
  absl::Duration wait_slice = absl::Milliseconds(200);
  // Opening again after the journal could not be opened or broke: 1 s doubling to 30 s.
  absl::Duration reopen_initial = absl::Seconds(1);
  absl::Duration reopen_max = absl::Seconds(30);
  Clock* clock = Clock::Real();
};

class JournalReader : public LogSource {
 public:
  using Handler = std::function<void(const Record& record)>;

  JournalReader(JournalReaderOptions options, Handler handler);
  ~JournalReader() override;  // Stop()

  void CatchUp() override;
  void Start() override;
  void Stop() override;
  const ReaderStats& stats() const override { return stats_; }
  std::string description() const override { return "journal " + options_.directory; }

 private:
  enum class Phase { kIdle, kCatchingUp, kCaughtUp, kFollowing, kStopping };
  void Loop();
  bool WaitForPhase(Phase at_least);
  void SetPhase(Phase phase);

  const JournalReaderOptions options_;
  const Handler handler_;
  ReaderStats stats_;
  std::thread thread_;

  mutable absl::Mutex mutex_;
  Phase phase_ ABSL_GUARDED_BY(mutex_) = Phase::kIdle;
};

// The sequence number in a journal cursor ("s=…;i=1a2b;b=…"): the `i=` field, hexadecimal.
// nullopt when the cursor has none.
std::optional<uint64_t> JournalCursorSequence(std::string_view cursor);

}  // namespace vigil::kmsg
