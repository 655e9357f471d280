// The kernel log's record format, as /dev/kmsg serves it (Documentation/ABI/testing/dev-kmsg):
//
//   PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS[,...];MESSAGE
//    KEY=value            (zero or more dictionary lines, each starting with a space)
//
// PRIORITY is facility * 8 + level (facility 0 is the kernel; anything a process writes to
// /dev/kmsg has another facility, so a line cannot pass for the driver's); SEQUENCE increases
// by one per record within a boot; TIMESTAMP_US is microseconds since boot (CLOCK_MONOTONIC);
// FLAGS is '-' or 'c' (a continued fragment). Non-printable bytes of MESSAGE, the backslash
// included, are escaped as \xNN, so a multi-line printk arrives as one record with \x0a in it.
// A reading of the device returns one record; a saved log (a file or FIFO in this format) has
// the records one after another, each ended by its newline.
// Pure functions and a splitter owned by one reader; no threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::kmsg {

struct Record {
  int facility = 0;  // 0: the kernel
  int level = 0;     // 0 (emergency) ... 7 (debug)
  uint64_t sequence = 0;
  int64_t monotonic_us = 0;                                     // since boot
  bool continued = false;                                       // FLAGS 'c'
  std::string message;                                          // unescaped
  std::vector<std::pair<std::string, std::string>> dictionary;  // SUBSYSTEM=pci, DEVICE=+pci:...
};

// Parses one record: its header line and any dictionary lines after it (a trailing newline is
// allowed). InvalidArgument saying what is wrong for anything else; never reads past `text`.
absl::StatusOr<Record> ParseRecord(std::string_view text);

// Undoes the kernel's \xNN escaping; anything else (a lone backslash, a bad hex pair) is kept as
// it is.
std::string Unescape(std::string_view text);

// Cuts a stream of records (a saved log, read in pieces of any size) into whole records: a
// record ends where the next line does not start with a space. Feed() calls `on_record` with
// each record that is complete. Pause() says the stream has nothing more for now: the record
// whose lines are all in is handed on (the kernel writes a record's dictionary lines with it),
// while a line still without its newline waits for the rest (a writer may split a line across
// writes). Finish() says the stream ended: everything left is handed on. Both may be called any
// number of times. Lines longer than `max_record` are cut there (a corrupt log must not grow
// memory without bound).
class Splitter {
 public:
  using OnRecord = std::function<void(std::string_view record)>;
  explicit Splitter(OnRecord on_record, size_t max_record = 64 * 1024)
      : on_record_(std::move(on_record)), max_record_(max_record) {}
  void Feed(std::string_view data);
  void Pause();
  void Finish();

 private:
  void Flush();

  OnRecord on_record_;
  const size_t max_record_;
  std::string record_;   // lines of the record being assembled
  std::string partial_;  // a line not ended yet
};

}  // namespace vigil::kmsg
