// Implements the journal files for tests through systemd-journal-remote.
#include "testing/journal.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "fmt/format.h"

namespace vigil::testing {

JournalEntry KernelEntry(const std::string& boot_id, const std::string& message,
                         int64_t monotonic_us, int facility, int priority) {
  return {{"__REALTIME_TIMESTAMP", std::to_string(absl::ToUnixMicros(absl::Now()))},
          {"__MONOTONIC_TIMESTAMP", std::to_string(monotonic_us)},
          {"_BOOT_ID", absl::StrReplaceAll(boot_id, {{"-", ""}})},
          {"_TRANSPORT", "kernel"},
          {"SYSLOG_FACILITY", std::to_string(facility)},
          {"PRIORITY", std::to_string(priority)},
          {"SYSLOG_IDENTIFIER", "kernel"},
          {"_SOURCE_MONOTONIC_TIMESTAMP", std::to_string(monotonic_us)},
          {"MESSAGE", message}};
}

absl::Status AppendJournal(const std::string& dir, const std::vector<JournalEntry>& entries) {
  std::filesystem::create_directories(dir);
  const std::string export_file = dir + "/entries.export";
  {
    // Text fields, one per line; an entry ends with an empty line (the last one too, else the
    // tool drops it as a premature end).
    std::ofstream out(export_file, std::ios::trunc);
    for (const JournalEntry& entry : entries) {
      for (const auto& [name, value] : entry) out << name << '=' << value << '\n';
      out << '\n';
    }
  }
  auto run = RunSubprocess(
      {"/lib/systemd/systemd-journal-remote", "--output=" + dir + "/system.journal", export_file},
      absl::Seconds(30));
  std::filesystem::remove(export_file);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0 ||
      run->output.find(fmt::format("writing {} entries", entries.size())) == std::string::npos) {
    return absl::FailedPreconditionError(
        fmt::format("systemd-journal-remote (scripts/install-deps installs it) did not write {} "
                    "entries: {}",
                    entries.size(), run->output));
  }
  return absl::OkStatus();
}

}  // namespace vigil::testing
