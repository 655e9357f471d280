// An Env for tests that wraps another (normally Env::Default() on a temp dir) and injects the
// failures a real disk has: an operation that fails with an errno (ENOSPC on a write, EIO on an
// fsync, a failed rename), a torn write (only a prefix reaches the file, then an error), and an
// fsync that blocks until released (a stuck disk); and a crash point after which nothing
// reaches the disk (a process killed there). It records every operation, so a test can
// assert what was attempted.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env.h"

namespace vigil::testing {

class FaultEnv final : public Env {
 public:
  enum class Op {
    kRead,
    kOpen,
    kAppend,
    kSync,
    kRename,
    kSyncDir,
    kList,
    kDelete,
    kCreateDir,
    kStat
  };

  explicit FaultEnv(Env* base = Env::Default()) : base_(base) {}

  // The next `count` operations of kind `op` fail with `error` (an errno, e.g. ENOSPC) without
  // touching the file.
  void FailNext(Op op, int error, int count = 1);
  // The next Append writes only its first `bytes` bytes, then fails with EIO.
  void TearNextAppend(size_t bytes);
  // While blocked, every Sync waits (before syncing) until UnblockSyncs().
  void BlockSyncs();
  void UnblockSyncs();
  // Waits (real time, at most `timeout`) until `count` Syncs are waiting.
  bool AwaitBlockedSyncs(int count, absl::Duration timeout = absl::Seconds(10));
  // A crash point: the process dies after `operations` more operations. Those reach the disk;
  // every later one fails with EIO and touches nothing, as for a process killed there (kill -9:
  // what it wrote before stays, in the page cache at least).
  void CrashAfter(int operations);
  bool crashed() const;  // an operation came after the crash point

  // "append health.log", "sync health.log", "rename health.log.tmp", ... with " FAILED" when a
  // fault was injected; file names only (no directory).
  std::vector<std::string> Operations() const;
  int Count(Op op) const;

  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override;
  absl::Status DeleteFile(const std::string& path) override;
  absl::Status CreateDir(const std::string& dir) override;
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override;

 private:
  class File;
  // Records `op` on `path` and returns the injected failure for it, if any; for an append,
  // `tear` receives the bytes to keep when it is to be torn.
  absl::Status Begin(Op op, const std::string& path, std::optional<size_t>* tear = nullptr);
  absl::Status Append(WritableFile* file, const std::string& path, std::string_view data);
  absl::Status Sync(WritableFile* file, const std::string& path);

  Env* const base_;
  mutable absl::Mutex mutex_;
  std::map<Op, std::vector<int>> failures_ ABSL_GUARDED_BY(mutex_);  // errnos, in order
  std::vector<size_t> tears_ ABSL_GUARDED_BY(mutex_);
  std::optional<int> operations_before_crash_ ABSL_GUARDED_BY(mutex_);  // nullopt: no crash point
  bool crashed_ ABSL_GUARDED_BY(mutex_) = false;
  bool syncs_blocked_ ABSL_GUARDED_BY(mutex_) = false;
  int syncs_waiting_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<std::string> operations_ ABSL_GUARDED_BY(mutex_);
  std::map<Op, int> counts_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil::testing
