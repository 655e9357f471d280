// Implements the journal reader over libsystemd's sd-journal: a directory opened, the kernel's
// entries of this boot matched, read from the head, then followed with sd_journal_wait(); a
// journal that breaks is opened again at the cursor delivered last.
#include "kmsg/journal_reader.h"

#include <systemd/sd-journal.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "common/backoff.h"
#include "common/thread.h"
#include "spdlog/spdlog.h"

namespace vigil::kmsg {
namespace {

// The value of `field` in the current entry ("MESSAGE=…" less its name), or nullopt.
std::optional<std::string> Field(sd_journal* journal, const char* field) {
  const void* data = nullptr;
  size_t length = 0;
  if (sd_journal_get_data(journal, field, &data, &length) < 0) return std::nullopt;
  const std::string_view text(static_cast<const char*>(data), length);
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) return std::nullopt;
  return std::string(text.substr(equals + 1));
}

std::optional<int64_t> IntField(sd_journal* journal, const char* field) {
  const std::optional<std::string> text = Field(journal, field);
  int64_t value = 0;
  if (!text.has_value() || !absl::SimpleAtoi(*text, &value)) return std::nullopt;
  return value;
}

// An sd_journal closed when it goes out of scope (on the thread that opened it).
struct Journal {
  sd_journal* handle = nullptr;
  ~Journal() {
    if (handle != nullptr) sd_journal_close(handle);
  }
};

}  // namespace

std::optional<uint64_t> JournalCursorSequence(std::string_view cursor) {
  for (size_t at = 0; at < cursor.size();) {
    const size_t end = std::min(cursor.find(';', at), cursor.size());
    const std::string_view part = cursor.substr(at, end - at);
    if (part.starts_with("i=")) {
      uint64_t sequence = 0;
      const std::string_view hex = part.substr(2);
      const auto [end_of_number, error] =
          std::from_chars(hex.data(), hex.data() + hex.size(), sequence, 16);
      if (error != std::errc() || end_of_number != hex.data() + hex.size() || hex.empty()) {
        return std::nullopt;
      }
      return sequence;
    }
    at = end + 1;
  }
  return std::nullopt;
}

JournalReader::JournalReader(JournalReaderOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

JournalReader::~JournalReader() { Stop(); }

void JournalReader::SetPhase(Phase phase) {
  absl::MutexLock lock(&mutex_);
  if (phase_ != Phase::kStopping) phase_ = phase;
}

bool JournalReader::WaitForPhase(Phase at_least) {
  absl::MutexLock lock(&mutex_);
  const auto reached = [this, at_least]()
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return phase_ >= at_least; };
  mutex_.Await(absl::Condition(&reached));
  return phase_ != Phase::kStopping;
}

void JournalReader::CatchUp() {
  if (thread_.joinable()) return;
  SetPhase(Phase::kCatchingUp);
  thread_ = StartNamedThread("vigil-journal", [this] { Loop(); });
  WaitForPhase(Phase::kCaughtUp);
}

void JournalReader::Start() {
  if (!thread_.joinable()) {
    SetPhase(Phase::kFollowing);
    thread_ = StartNamedThread("vigil-journal", [this] { Loop(); });
    return;
  }
  SetPhase(Phase::kFollowing);
}

void JournalReader::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    phase_ = Phase::kStopping;
  }
  if (thread_.joinable()) thread_.join();
}

void JournalReader::Loop() {
  Backoff backoff(BackoffPolicy{.initial = options_.reopen_initial, .max = options_.reopen_max});
  const std::string boot_id = absl::StrReplaceAll(options_.boot_id, {{"-", ""}});
  std::string last_cursor;  // the entry delivered last: where a reopened journal goes on
  LogState logged = LogState::kNotStarted;
  bool first = true;
  const auto stopping = [this] {
    absl::MutexLock lock(&mutex_);
    return phase_ == Phase::kStopping;
  };
  while (!stopping()) {
    if (!first) ++stats_.reopens;
    first = false;
    Journal journal;
    int result = sd_journal_open_directory(&journal.handle, options_.directory.c_str(), 0);
    if (result >= 0) result = sd_journal_add_match(journal.handle, "_TRANSPORT=kernel", 0);
    if (result >= 0 && !boot_id.empty()) {
      result = sd_journal_add_match(journal.handle, ("_BOOT_ID=" + boot_id).c_str(), 0);
    }
    if (result >= 0) {
      result = last_cursor.empty() ? sd_journal_seek_head(journal.handle)
                                   : sd_journal_seek_cursor(journal.handle, last_cursor.c_str());
    }
    const LogState state = result >= 0         ? LogState::kReading
                           : result == -ENOENT ? LogState::kAbsent
                                               : LogState::kUnreadable;
    stats_.state = state;
    if (state != logged) {
      if (state == LogState::kReading) {
        spdlog::info("kmsg: following the kernel's messages in the journal {}", options_.directory);
      } else {
        spdlog::warn("kmsg: cannot read the journal {} ({}); retrying", options_.directory,
                     std::strerror(-result));
      }
      logged = state;
    }
    bool broke = false;
    // Delivers every entry after the position; false when the journal failed.
    const auto drain = [&] {
      for (;;) {
        const int next = sd_journal_next(journal.handle);
        if (next < 0) return false;
        if (next == 0) return true;
        char* cursor = nullptr;
        if (sd_journal_get_cursor(journal.handle, &cursor) >= 0) {
          const bool seen = last_cursor == cursor;
          last_cursor = cursor;
          free(cursor);
          if (seen) continue;  // a reopened journal's first entry is the one delivered last
        }
        const std::optional<std::string> message = Field(journal.handle, "MESSAGE");
        const std::optional<int64_t> facility = IntField(journal.handle, "SYSLOG_FACILITY");
        if (!message.has_value()) {
          ++stats_.bad_records;
          continue;
        }
        Record record;
        // An entry without a facility was not the kernel's record: never taken for the driver.
        record.facility = facility.has_value() ? static_cast<int>(*facility) : -1;
        record.level = static_cast<int>(IntField(journal.handle, "PRIORITY").value_or(6));
        record.sequence = JournalCursorSequence(last_cursor).value_or(0);
        if (std::optional<int64_t> kernel_us =
                IntField(journal.handle, "_SOURCE_MONOTONIC_TIMESTAMP")) {
          record.monotonic_us = *kernel_us;
        } else {
          uint64_t monotonic = 0;
          sd_id128_t boot{};
          if (sd_journal_get_monotonic_usec(journal.handle, &monotonic, &boot) >= 0) {
            record.monotonic_us = static_cast<int64_t>(monotonic);
          }
        }
        record.message = *message;
        handler_(record);
      }
    };
    if (state == LogState::kReading) {
      backoff.Reset();
      broke = !drain();
      {
        absl::MutexLock lock(&mutex_);
        if (phase_ == Phase::kCatchingUp) phase_ = Phase::kCaughtUp;
      }
      if (!broke && !WaitForPhase(Phase::kFollowing)) break;
      absl::Time last_entry = options_.clock->Now();
      while (!broke && !stopping()) {
        const int waited = sd_journal_wait(
            journal.handle, static_cast<uint64_t>(absl::ToInt64Microseconds(options_.wait_slice)));
        if (waited < 0) {
          spdlog::warn("kmsg: waiting on the journal {} failed ({}); opening it again",
                       options_.directory, std::strerror(-waited));
          broke = true;
          break;
        }
        const std::string before = last_cursor;
        broke = !drain();
        if (last_cursor != before) {
          last_entry = options_.clock->Now();
        } else if (options_.on_idle != nullptr &&
                   options_.clock->Now() - last_entry >= options_.idle_interval) {
          options_.on_idle();
          last_entry = options_.clock->Now();
        }
      }
      if (!broke) break;  // stopping
    } else {
      absl::MutexLock lock(&mutex_);
      if (phase_ == Phase::kCatchingUp) phase_ = Phase::kCaughtUp;  // CatchUp() returns
    }
    absl::MutexLock lock(&mutex_);
    options_.clock->AwaitWithTimeout(
        &mutex_,
        absl::Condition(
            +[](Phase* phase) { return *phase == Phase::kStopping; }, &phase_),
        backoff.Next());
  }
}

}  // namespace vigil::kmsg
