// Implements Env::Default() on POSIX: open/write/fsync/rename, with errno in every error.
#include "common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/files.h"
#include "fmt/format.h"

namespace vigil {
namespace {

absl::Status ErrnoError(std::string_view what, const std::string& path, int error) {
  const std::string message = fmt::format("cannot {} {}: {}", what, path, std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override { close(fd_); }

  absl::Status Append(std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("write", path_, errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fsync(fd_) != 0) return ErrnoError("sync", path_, errno);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return vigil::ReadFile(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC);
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0)
      return ErrnoError("rename " + from + " to", to, errno);
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open", dir, errno);
    const int synced = fsync(fd);
    const int error = errno;
    close(fd);
    if (synced != 0) return ErrnoError("sync", dir, error);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* handle = opendir(dir.c_str());
    if (handle == nullptr) return ErrnoError("list", dir, errno);
    std::vector<std::string> names;
    while (const dirent* entry = readdir(handle)) {
      const std::string_view name = entry->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    closedir(handle);
    std::sort(names.begin(), names.end());
    return names;
  }
  absl::Status DeleteFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) return ErrnoError("remove", path, errno);
    return absl::OkStatus();
  }
  absl::Status CreateDir(const std::string& dir) override {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) return ErrnoError("create the directory", dir, error.value());
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat info;
    if (stat(path.c_str(), &info) != 0) return ErrnoError("stat", path, errno);
    return static_cast<uint64_t>(info.st_size);
  }

 private:
  static absl::StatusOr<std::unique_ptr<WritableFile>> Open(const std::string& path, int flags) {
    const int fd = open(path.c_str(), flags, 0600);
    if (fd < 0) return ErrnoError("write", path, errno);
    return std::make_unique<PosixWritableFile>(path, fd);
  }
};

}  // namespace

absl::Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents) {
  const std::string temporary = path + ".tmp";
  auto file = env->NewWritableFile(temporary);
  if (!file.ok()) return file.status();
  // A write that fails leaves no temporary file behind (a full disk is not made fuller).
  const auto failed = [&](absl::Status status) {
    file->reset();
    env->DeleteFile(temporary).IgnoreError();  // best effort: the write's error is the news
    return status;
  };
  if (absl::Status s = (*file)->Append(contents); !s.ok()) return failed(s);
  if (absl::Status s = (*file)->Sync(); !s.ok()) return failed(s);
  file->reset();
  if (absl::Status s = env->RenameFile(temporary, path); !s.ok()) return failed(s);
  const size_t slash = path.rfind('/');
  return env->SyncDir(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
}

Env* Env::Default() {
  static PosixEnv* const env = new PosixEnv();
  return env;
}

}  // namespace vigil
