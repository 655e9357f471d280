// Writes systemd journal files for tests, with systemd's own tool: entries in the journal export
// format (JOURNAL_EXPORT_FORMATS.md) fed to systemd-journal-remote, which writes (or appends to)
// DIR/system.journal. A kernel message as journald records one from /dev/kmsg is KernelEntry().
// Not thread-safe; one test at a time per directory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vigil::testing {

using JournalEntry = std::map<std::string, std::string>;

// The fields journald gives a /dev/kmsg record (journald-kmsg.c): _TRANSPORT=kernel,
// SYSLOG_FACILITY, PRIORITY, SYSLOG_IDENTIFIER=kernel, _SOURCE_MONOTONIC_TIMESTAMP, _BOOT_ID
// (`boot_id` without dashes), MESSAGE, and the realtime stamp systemd-journal-remote requires.
JournalEntry KernelEntry(const std::string& boot_id, const std::string& message,
                         int64_t monotonic_us, int facility = 0, int priority = 4);

// Appends `entries` to DIR/system.journal (made with DIR when absent). FailedPrecondition with
// the tool's words when it fails or is not installed (scripts/install-deps installs it).
absl::Status AppendJournal(const std::string& dir, const std::vector<JournalEntry>& entries);

}  // namespace vigil::testing
