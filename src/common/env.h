// The file system as Vigil's persistent state uses it (leveldb's Env): whole-file reads, files
// written or appended to and synced, renames and directory syncs, behind a narrow interface so
// that tests can wrap it with a fake that fails, tears or blocks any operation
// (testing/fault_env.h). Errors name the file and say why ("cannot write PATH: No space left on
// device").
// Thread-safety: an Env may be used from any thread; one WritableFile from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vigil {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of `data` at the end of the file. On an error, a prefix of it may have been
  // written (a torn write): the caller must not assume either way.
  virtual absl::Status Append(std::string_view data) = 0;
  // Makes what was appended durable (fsync).
  virtual absl::Status Sync() = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The real file system. Never null; lives for the whole process.
  static Env* Default();

  // NotFound when the file does not exist.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Creates `path`, or truncates it, for writing (mode 0600).
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens `path` to append to it, creating it (mode 0600) when missing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;
  // Atomically replaces `to` with `from`.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Makes the directory's entries (a rename, a new file) durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  // The names of the directory's entries (not "." and ".."), sorted; NotFound when it does not
  // exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // Removes a file; NotFound when it does not exist.
  virtual absl::Status DeleteFile(const std::string& path) = 0;
  // Creates the directory (and its parents, mode 0700) unless it exists.
  virtual absl::Status CreateDir(const std::string& dir) = 0;
  // The file's size in bytes.
  virtual absl::StatusOr<uint64_t> FileSize(const std::string& path) = 0;
};

// Replaces `path` with `contents` so that a crash leaves either the old file or the new one:
// written to `path`.tmp, synced, renamed over `path`, and the directory synced. A failed write
// removes its `path`.tmp.
absl::Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents);

}  // namespace vigil
