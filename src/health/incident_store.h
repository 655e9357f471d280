// Keeps FAIL incidents on disk (STATE_DIR/health.log) so that an engine restart, crash or
// kill -9 never makes a failing GPU look healthy — without the disk ever delaying a tick or an
// XID: Raised() and Cleared() only queue a record, and a writer thread of the store's own
// (`vigil-persist`) appends and fsyncs the records in order. A FAIL is therefore served from
// memory at once and persisted right after; while the disk fails (full, EIO, a stuck fsync) the
// writer logs once, counts, and retries the same record with a backoff (100 ms doubling to 5 s),
// so nothing is reordered or dropped, and stats() shows the lag.
//
// Format: an append-only log, one record per line: 8 hex digits of CRC-32, a space, a JSON
// object — {"op":"boot","boot_id":…}, {"op":"raise", incident…} (with "log_source" and
// "log_sequence" when it counts kernel-log records: the count and the record are one write, so
// a restart never counts that record again nor loses it), {"op":"clear","uuid":…,
// "key":…,"reason":…}, {"op":"operator_clear","uuid":…,"system":…,"time_us":…} (uuid "" for the
// node's systems, system "" for all; the latest per GPU and system is kept). On open, the log is
// replayed (a torn or corrupted record is reported and skipped; the others are kept), incidents
// from before a reboot (a boot record other than the current boot) are dropped, and the survivors
// are written to a fresh log (temporary file, sync, rename, sync of the directory) so it does not
// grow without bound. When compaction fails (a full disk, a failed rename), the old log stays as it
// was and new records are appended to it. A write that failed part-way may leave a partial record:
// the next one starts on a new line, so replay skips only the fragment.
//
// All file access goes through an Env, so tests inject every failure (testing/fault_env.h).
// Thread-safety: Raised(), Cleared(), stats() and Flush() may be called from any thread; they
// take only `mutex_`, which is never held during I/O. Lock order: callers may hold their own
// locks (HealthEvaluator::mutex_) when calling in; `mutex_` is a leaf.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/env.h"
#include "health/evaluator.h"

namespace vigil {

class IncidentStore : public IncidentSink {
 public:
  struct Options {
    std::string state_dir;
    std::string boot_id;           // the node's boot id; a change drops persisted incidents
    Env* env = Env::Default();     // not owned; outlives the store
    Clock* clock = Clock::Real();  // for the retry backoff; not owned
  };
  struct Loaded {
    std::vector<Incident> incidents;    // surviving FAIL incidents (gpu index as recorded)
    std::vector<OperatorClear> clears;  // the operator clears of this boot
    std::vector<std::string> problems;  // corrupt or torn records, a failed compaction: for the log
    bool rebooted = false;              // incidents were dropped: the node rebooted since
    size_t dropped = 0;
  };
  struct Stats {
    uint64_t pending = 0;   // records queued, not yet durable
    absl::Duration lag;     // how long the oldest pending record has waited (0: none)
    uint64_t written = 0;   // records made durable since the store opened
    uint64_t failures = 0;  // failed write or sync attempts (and a failed compaction)
  };

  // Opens or creates the log in the state dir; an error when it can be neither read nor
  // appended to ("cannot write PATH: ...: check --state-dir").
  static absl::StatusOr<std::unique_ptr<IncidentStore>> Open(const Options& options,
                                                             Loaded* loaded);
  // Persists what is still queued (giving up on the first failure), then stops the writer. It
  // waits for a write in progress: on a disk whose fsync never returns, shutdown waits too (as
  // the kernel would make the process wait at exit anyway).
  ~IncidentStore() override;

  // Queue a record; never wait for the disk.
  void Raised(const Incident& incident) override;
  void Cleared(const Incident& incident, std::string_view reason) override;
  void OperatorCleared(const OperatorClear& clear) override;

  Stats stats() const;
  // Waits (real time, at most `timeout`) until every record queued before the call is durable.
  bool Flush(absl::Duration timeout);

 private:
  struct Record {
    std::string frame;  // one framed line, newline included
    absl::Time queued;
  };
  IncidentStore(const Options& options, std::string path, std::unique_ptr<WritableFile> file,
                bool tail_dirty);
  void Queue(std::string json);
  void WriterLoop();
  // Writer thread: appends and syncs one record.
  absl::Status Write(const std::string& frame);

  Clock* const clock_;
  const std::string path_;
  // Owned by the writer thread once it runs.
  std::unique_ptr<WritableFile> file_;
  bool tail_dirty_;  // the file may end in a partial record: start the next on a new line

  mutable absl::Mutex mutex_;
  std::deque<Record> queue_ ABSL_GUARDED_BY(mutex_);  // the front is being written
  uint64_t queued_total_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t written_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread writer_;
};

// The kernel's boot id (/proc/sys/kernel/random/boot_id), or $VIGIL_BOOT_ID_FILE's content when
// set (for tests that simulate a reboot).
std::string CurrentBootId();

}  // namespace vigil
