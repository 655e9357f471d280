// Implements FaultEnv: each operation is recorded, then either fails as scripted or goes to the
// wrapped Env.
#include "testing/fault_env.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "fmt/format.h"

namespace vigil::testing {
namespace {

std::string_view OpName(FaultEnv::Op op) {
  switch (op) {
    case FaultEnv::Op::kRead:
      return "read";
    case FaultEnv::Op::kOpen:
      return "open";
    case FaultEnv::Op::kAppend:
      return "append";
    case FaultEnv::Op::kSync:
      return "sync";
    case FaultEnv::Op::kRename:
      return "rename";
    case FaultEnv::Op::kSyncDir:
      return "syncdir";
    case FaultEnv::Op::kList:
      return "list";
    case FaultEnv::Op::kDelete:
      return "delete";
    case FaultEnv::Op::kCreateDir:
      return "mkdir";
    case FaultEnv::Op::kStat:
      return "stat";
  }
  return "?";
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status Injected(FaultEnv::Op op, const std::string& path, int error) {
  const std::string message =
      fmt::format("cannot {} {}: {} (injected)", OpName(op), path, std::strerror(error));
  return error == ENOSPC ? absl::ResourceExhaustedError(message) : absl::InternalError(message);
}

}  // namespace

class FaultEnv::File final : public WritableFile {
 public:
  File(FaultEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}
  absl::Status Append(std::string_view data) override {
    return env_->Append(base_.get(), path_, data);
  }
  absl::Status Sync() override { return env_->Sync(base_.get(), path_); }

 private:
  FaultEnv* const env_;
  const std::string path_;
  const std::unique_ptr<WritableFile> base_;
};

void FaultEnv::FailNext(Op op, int error, int count) {
  absl::MutexLock lock(&mutex_);
  for (int i = 0; i < count; ++i) failures_[op].push_back(error);
}

void FaultEnv::TearNextAppend(size_t bytes) {
  absl::MutexLock lock(&mutex_);
  tears_.push_back(bytes);
}

void FaultEnv::BlockSyncs() {
  absl::MutexLock lock(&mutex_);
  syncs_blocked_ = true;
}

void FaultEnv::UnblockSyncs() {
  absl::MutexLock lock(&mutex_);
  syncs_blocked_ = false;
}

bool FaultEnv::AwaitBlockedSyncs(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return syncs_waiting_ >= count; };
  return mutex_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void FaultEnv::CrashAfter(int operations) {
  absl::MutexLock lock(&mutex_);
  operations_before_crash_ = operations;
}

bool FaultEnv::crashed() const {
  absl::MutexLock lock(&mutex_);
  return crashed_;
}

std::vector<std::string> FaultEnv::Operations() const {
  absl::MutexLock lock(&mutex_);
  return operations_;
}

int FaultEnv::Count(Op op) const {
  absl::MutexLock lock(&mutex_);
  auto it = counts_.find(op);
  return it == counts_.end() ? 0 : it->second;
}

absl::Status FaultEnv::Begin(Op op, const std::string& path, std::optional<size_t>* tear) {
  absl::MutexLock lock(&mutex_);
  ++counts_[op];
  std::string record = fmt::format("{} {}", OpName(op), BaseName(path));
  std::vector<int>& failures = failures_[op];
  if (operations_before_crash_ == 0) {
    crashed_ = true;
    operations_.push_back(record + " CRASHED");
    return Injected(op, path, EIO);
  }
  if (operations_before_crash_.has_value()) --*operations_before_crash_;
  absl::Status status;
  if (!failures.empty()) {
    status = Injected(op, path, failures.front());
    failures.erase(failures.begin());
    record += " FAILED";
  } else if (op == Op::kAppend && tear != nullptr && !tears_.empty()) {
    *tear = tears_.front();  // decided with the record, so the mark lands on this append
    tears_.erase(tears_.begin());
    record += " TORN";
  }
  operations_.push_back(std::move(record));
  return status;
}

absl::StatusOr<std::string> FaultEnv::ReadFile(const std::string& path) {
  if (absl::Status failed = Begin(Op::kRead, path); !failed.ok()) return failed;
  return base_->ReadFile(path);
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultEnv::NewWritableFile(const std::string& path) {
  if (absl::Status failed = Begin(Op::kOpen, path); !failed.ok()) return failed;
  auto file = base_->NewWritableFile(path);
  if (!file.ok()) return file.status();
  return std::make_unique<File>(this, path, std::move(*file));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultEnv::NewAppendableFile(const std::string& path) {
  if (absl::Status failed = Begin(Op::kOpen, path); !failed.ok()) return failed;
  auto file = base_->NewAppendableFile(path);
  if (!file.ok()) return file.status();
  return std::make_unique<File>(this, path, std::move(*file));
}

absl::Status FaultEnv::RenameFile(const std::string& from, const std::string& to) {
  if (absl::Status failed = Begin(Op::kRename, from); !failed.ok()) return failed;
  return base_->RenameFile(from, to);
}

absl::Status FaultEnv::SyncDir(const std::string& dir) {
  if (absl::Status failed = Begin(Op::kSyncDir, dir); !failed.ok()) return failed;
  return base_->SyncDir(dir);
}

absl::StatusOr<std::vector<std::string>> FaultEnv::ListDir(const std::string& dir) {
  if (absl::Status failed = Begin(Op::kList, dir); !failed.ok()) return failed;
  return base_->ListDir(dir);
}

absl::Status FaultEnv::DeleteFile(const std::string& path) {
  if (absl::Status failed = Begin(Op::kDelete, path); !failed.ok()) return failed;
  return base_->DeleteFile(path);
}

absl::Status FaultEnv::CreateDir(const std::string& dir) {
  if (absl::Status failed = Begin(Op::kCreateDir, dir); !failed.ok()) return failed;
  return base_->CreateDir(dir);
}

absl::StatusOr<uint64_t> FaultEnv::FileSize(const std::string& path) {
  if (absl::Status failed = Begin(Op::kStat, path); !failed.ok()) return failed;
  return base_->FileSize(path);
}

absl::Status FaultEnv::Append(WritableFile* file, const std::string& path, std::string_view data) {
  std::optional<size_t> tear;
  if (absl::Status failed = Begin(Op::kAppend, path, &tear); !failed.ok()) return failed;
  if (!tear) return file->Append(data);
  if (absl::Status written = file->Append(data.substr(0, std::min(*tear, data.size())));
      !written.ok()) {
    return written;
  }
  return Injected(Op::kAppend, path, EIO);
}

absl::Status FaultEnv::Sync(WritableFile* file, const std::string& path) {
  if (absl::Status failed = Begin(Op::kSync, path); !failed.ok()) return failed;
  {
    absl::MutexLock lock(&mutex_);
    ++syncs_waiting_;
    mutex_.Await(absl::Condition(
        +[](bool* blocked) { return !*blocked; }, &syncs_blocked_));
    --syncs_waiting_;
  }
  return file->Sync();
}

}  // namespace vigil::testing
