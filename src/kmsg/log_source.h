// Where the kernel's messages come from, as the kernel log's XID source sees it: /dev/kmsg (or a
// file in its format: Reader) or the systemd journal (JournalReader). Each delivers kmsg Records
// to a handler on a thread of its own, from the start of this boot's log.
// Threads: CatchUp(), Start() and Stop() from the owner; stats() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace vigil::kmsg {

enum class LogState {
  kNotStarted,
  kReading,     // open and followed
  kAbsent,      // no such file (retried)
  kUnreadable,  // permission denied or another error (retried): CAP_SYSLOG, dmesg_restrict
};

struct ReaderStats {
  std::atomic<uint64_t> bad_records{0};  // not in the record format (each logged at debug)
  std::atomic<uint64_t> overwritten{0};  // EPIPE: the ring buffer moved past unread records
  std::atomic<uint64_t> reopens{0};
  std::atomic<LogState> state{LogState::kNotStarted};
};

class LogSource {
 public:
  virtual ~LogSource() = default;
  // Delivers every record the log holds now before it returns. At most once, before Start().
  virtual void CatchUp() = 0;
  // Follows the log from there on the source's thread.
  virtual void Start() = 0;
  // Ends following and joins the thread. Idempotent.
  virtual void Stop() = 0;
  virtual const ReaderStats& stats() const = 0;
  // What is read, as `vigil info` names it: "/dev/kmsg", "journal /var/log/journal".
  virtual std::string description() const = 0;
};

}  // namespace vigil::kmsg
