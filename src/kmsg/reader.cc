// Implements the kernel log reader over open/read/poll: the device one record per read(), files
// and FIFOs through the record splitter.
#include "kmsg/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/backoff.h"
#include "common/status.h"
#include "common/thread.h"
#include "spdlog/spdlog.h"

namespace vigil::kmsg {

Reader::Reader(ReaderOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {
  // A broken invariant if it fails: the process is out of file descriptors at start.
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    spdlog::critical("kmsg: cannot make a pipe: {}", std::strerror(errno));
    std::abort();
  }
}

Reader::~Reader() {
  Stop();
  if (fd_ >= 0) close(fd_);  // caught up but never started
  close(wake_[0]);
  close(wake_[1]);
}

void Reader::Start() {
  if (thread_.joinable()) return;
  thread_ = StartNamedThread("vigil-kmsg", [this] { Loop(); });
}

void Reader::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  const char byte = 1;
  (void)!write(wake_[1], &byte, 1);
  if (thread_.joinable()) thread_.join();
}

bool Reader::stopping() const {
  absl::MutexLock lock(&mutex_);
  return stopping_;
}

bool Reader::WaitReadable(absl::Duration timeout) {
  pollfd fds[2] = {{.fd = fd_, .events = POLLIN, .revents = 0},
                   {.fd = wake_[0], .events = POLLIN, .revents = 0}};
  const int ms = timeout == absl::InfiniteDuration()
                     ? -1
                     : static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout)));
  if (poll(fds, 2, ms) < 0 && errno != EINTR) {
    Nap();  // not expected (the fds are ours); do not spin on it
  }
  return !stopping();
}

void Reader::Nap() {
  pollfd wake = {.fd = wake_[0], .events = POLLIN, .revents = 0};
  poll(&wake, 1, static_cast<int>(absl::ToInt64Milliseconds(options_.follow_interval)));
}

bool Reader::Replaced() const {
  struct stat now {};
  return stat(options_.path.c_str(), &now) == 0 && now.st_ino != inode_;
}

bool Reader::Open() {
  fd_ = open(options_.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  LogState state = LogState::kReading;
  std::string why;
  struct stat info {};
  if (fd_ < 0) {
    state = errno == ENOENT ? LogState::kAbsent : LogState::kUnreadable;
    why = std::strerror(errno);
  } else if (fstat(fd_, &info) != 0 || S_ISDIR(info.st_mode)) {
    state = LogState::kUnreadable;
    why = S_ISDIR(info.st_mode) ? "it is a directory" : std::strerror(errno);
    close(fd_);
    fd_ = -1;
  }
  stats_.state = state;
  if (state != logged_) {
    if (state == LogState::kReading) {
      spdlog::info("kmsg: following the kernel log {}", options_.path);
    } else {
      spdlog::warn(
          "kmsg: cannot read the kernel log {} ({}): XIDs reach the engine only through NVML's "
          "events until it can{}; retrying",
          options_.path, why,
          state == LogState::kUnreadable
              ? " (reading /dev/kmsg needs CAP_SYSLOG where kernel.dmesg_restrict=1)"
              : "");
    }
    logged_ = state;
  }
  if (fd_ < 0) return false;
  if (S_ISFIFO(info.st_mode)) {
    // Read and write: the reader is then a writer too, so the FIFO never reads as ended when
    // the process that feeds it goes away and comes back (a replay restarted).
    const int both = open(options_.path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (both >= 0) {
      close(fd_);
      fd_ = both;
    }
  }
  device_ = S_ISCHR(info.st_mode);
  fifo_ = S_ISFIFO(info.st_mode);
  inode_ = info.st_ino;
  return true;
}

void Reader::Deliver(std::string_view text) {
  auto record = ParseRecord(text);
  if (!record.ok()) {
    ++stats_.bad_records;
    spdlog::debug("kmsg: {}", MessageOf(record.status()));
    return;
  }
  handler_(*record);
}

Reader::FollowEnd Reader::Follow(bool until_caught_up) {
  Splitter splitter([this](std::string_view record) { Deliver(record); });
  // One record of the device is at most about 8 KiB (CONSOLE_EXT_LOG_MAX); a smaller buffer
  // would lose the record (EINVAL).
  char buffer[16 * 1024];
  while (!stopping()) {
    const ssize_t got = read(fd_, buffer, sizeof(buffer));
    if (got > 0) {
      if (device_) {
        Deliver(std::string_view(buffer, static_cast<size_t>(got)));
      } else {
        splitter.Feed(std::string_view(buffer, static_cast<size_t>(got)));
      }
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EPIPE) {
      ++stats_.overwritten;  // the position moved to the oldest record still held
      continue;
    }
    if (got < 0 && errno == EAGAIN) {
      splitter.Pause();  // nothing more for now: the record read last is whole
      if (until_caught_up) return FollowEnd::kCaughtUp;
      // A FIFO is looked at every idle interval too: one replaced under us (a new mkfifo for
      // the next replay) would never read as ended, since we hold it open for writing.
      const absl::Duration wait = !(device_ || fifo_)                    ? options_.follow_interval
                                  : fifo_ || options_.on_idle != nullptr ? options_.idle_interval
                                                                         : absl::InfiniteDuration();
      if (!WaitReadable(wait)) break;
      if (options_.on_idle != nullptr) options_.on_idle();
      if (fifo_ && Replaced()) {
        splitter.Finish();
        return FollowEnd::kReopenNow;
      }
      continue;
    }
    if (got == 0) {
      splitter.Pause();
      if (device_) return FollowEnd::kBackOff;
      if (Replaced()) {
        splitter.Finish();
        return FollowEnd::kReopenNow;
      }
      if (struct stat open_file{}; fstat(fd_, &open_file) == 0 && S_ISREG(open_file.st_mode) &&
                                   open_file.st_size < lseek(fd_, 0, SEEK_CUR)) {
        // Truncated in place (`: > log`, logrotate's copytruncate): read it again from its start.
        lseek(fd_, 0, SEEK_SET);
        splitter.Finish();
        continue;
      }
      if (fifo_) return FollowEnd::kBackOff;  // opened read-only after all; its writer left
      if (until_caught_up) return FollowEnd::kCaughtUp;
      Nap();  // a regular file at its end: look again later, as `tail -f`
      if (options_.on_idle != nullptr) options_.on_idle();
      continue;
    }
    spdlog::warn("kmsg: reading {} failed: {}; reopening", options_.path, std::strerror(errno));
    return FollowEnd::kBackOff;
  }
  splitter.Finish();
  return FollowEnd::kBackOff;
}

void Reader::CatchUp() {
  if (!Open()) return;
  if (Follow(/*until_caught_up=*/true) != FollowEnd::kCaughtUp) {
    close(fd_);
    fd_ = -1;
  }
}

void Reader::Loop() {
  Backoff backoff(BackoffPolicy{.initial = options_.reopen_initial, .max = options_.reopen_max});
  bool first = true;
  while (!stopping()) {
    if (!first) ++stats_.reopens;
    const bool open = (first && fd_ >= 0) || Open();  // CatchUp() may have opened it
    first = false;
    FollowEnd end = FollowEnd::kBackOff;
    if (open) {
      backoff.Reset();
      end = Follow(/*until_caught_up=*/false);
      close(fd_);
      fd_ = -1;
    }
    if (end == FollowEnd::kReopenNow) continue;
    absl::MutexLock lock(&mutex_);
    options_.clock->AwaitWithTimeout(&mutex_, absl::Condition(&stopping_), backoff.Next());
  }
}

}  // namespace vigil::kmsg
