// Keeps FAIL incidents on disk (STATE_DIR/health.log) so that an engine restart, crash or
// kill -9 never makes a failing GPU look healthy.
//
// Format: an append-only log, one record per line: 8 hex digits of CRC-32, a space, a JSON
// object — {"op":"boot","boot_id":…}, {"op":"raise", incident…}, {"op":"clear","uuid":…,
// "key":…,"reason":…}. Each append is fsynced. On open, the log is replayed (a torn last line or
// a corrupted record is reported and skipped; the other records are kept), incidents from before
// a reboot (a boot id other than the current one) are dropped, and the survivors are written to a
// fresh log (write to a temporary file, fsync, rename, fsync the directory) so it does not grow
// without bound.
// Thread-safety: Raised() and Cleared() may be called from any thread (one mutex).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "health/evaluator.h"

namespace vigil {

class IncidentStore : public IncidentSink {
 public:
  struct Loaded {
    std::vector<Incident> incidents;    // surviving FAIL incidents (gpu index as recorded)
    std::vector<std::string> problems;  // corrupt or torn records, for the log
    bool rebooted = false;              // incidents were dropped: the node rebooted since
    size_t dropped = 0;
  };

  // Opens or creates the log in `state_dir`.
  static absl::StatusOr<std::unique_ptr<IncidentStore>> Open(const std::string& state_dir,
                                                             const std::string& boot_id,
                                                             Loaded* loaded);
  ~IncidentStore() override;

  void Raised(const Incident& incident) override;
  void Cleared(const Incident& incident, std::string_view reason) override;

  const std::string& path() const { return path_; }

 private:
  IncidentStore(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void Append(const std::string& json) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string path_;
  absl::Mutex mutex_;
  int fd_ ABSL_GUARDED_BY(mutex_);
  bool write_failed_ ABSL_GUARDED_BY(mutex_) = false;  // log a failing disk once
};

// The kernel's boot id (/proc/sys/kernel/random/boot_id), or $VIGIL_BOOT_ID_FILE's content when
// set (for tests that simulate a reboot).
std::string CurrentBootId();

}  // namespace vigil
