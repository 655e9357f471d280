// XIDs from the kernel log, for the engine: follows the log (Reader), keeps the kernel's own lines
// (facility 0: a process cannot write those), parses the driver's (driver_line.h), maps each bus
// id to the engine's GPU and hands XIDs to the engine's EventSink as XidSource::kKernelLog. A bus
// id that is none of the engine's GPUs is logged (once per bus id) and counted, never dropped
// silently and never given to another GPU. SXids (the error line, not its Severity and Data
// follow-ups) go to the sink's OnSxid.
//
// At start, CatchUp() reads what the log already holds — the ring buffer since boot — on the
// caller's thread, so XIDs logged before the engine (re)started are judged by its first
// evaluation. What was applied is remembered in `state_path` (the boot id, the log's path and
// the sequence number of the last XID applied, written atomically): a restart in the same boot
// applies only later records; a new boot, or another log, starts afresh. An XID is written down
// as applied only once it has settled (kSettle: the engine has evaluated it at a tick and
// persisted its incident), so a crash just after an XID hands it again on the restart rather
// than losing it. Each XID and SXid carries its record's position (source, sequence): the
// engine's incident persists the latest it counted in the same record as the count, and a
// record handed again that its incident already holds is not counted twice — exactly once,
// whenever the engine dies. The driver prints XID 79 twice (the Xid line and "GPU has fallen off
// the bus."): one XID. Records followed live are timed by their arrival (the kernel log's clock
// drifts from the wall clock over days); those from before the start by their timestamp.
// Threads: the Reader's (`vigil-kmsg`) after Start(); CatchUp() on the caller's thread before it.
// stats() from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/clock.h"
#include "common/env.h"
#include "kmsg/driver_line.h"
#include "kmsg/journal_reader.h"
#include "kmsg/reader.h"

namespace vigil::kmsg {

struct KernelLogXidsStats {
  std::atomic<uint64_t> xids{0};             // handed to the engine
  std::atomic<uint64_t> replayed{0};         // ... of which from before the engine started
  std::atomic<uint64_t> already_applied{0};  // skipped: applied by an earlier run in this boot
  std::atomic<uint64_t> sxids{0};            // SXid errors (not their follow-up lines)
  std::atomic<uint64_t> unknown_bus{0};      // XIDs for a bus id that is none of the engine's GPUs
  std::atomic<uint64_t> not_kernel{0};       // driver-looking lines written by a process
  std::atomic<uint64_t> state_failures{0};   // the applied sequence could not be saved
};

// How long after an XID was handed to the engine it counts as applied for good.
inline constexpr absl::Duration kSettle = absl::Seconds(5);

struct KernelLogXidsOptions {
  std::string path;  // the kernel log (/dev/kmsg, a file or a FIFO)
  // Where the kernel's messages are read instead when `path` cannot be opened at start: the
  // systemd journal's directory (JournalReader). "" for none.
  std::string journal_dir;
  std::string state_path;  // where the applied sequence is kept; "" keeps none
  std::string boot_id;     // this boot's id
  Clock* clock = Clock::Real();
  Env* env = Env::Default();
  // The time of a record: `now` minus how long before now it was logged. The default reads
  // CLOCK_MONOTONIC, the kernel log's clock; tests pass their own.
  std::function<absl::Duration()> monotonic_now;
  // The kernel's other lines (not the NVIDIA driver's), for another module's parser (app gives
  // network's, for the mlx5 driver's lines), with the record's time: true when it took the line,
  // which then counts as applied like an XID (a restart in the same boot does not hand it again).
  // Runs on the reader's thread (CatchUp's caller before Start()); must not block. Unset: none.
  std::function<bool(std::string_view message, absl::Time time)> other_lines;
};

class KernelLogXids {
 public:
  // `gpus` are the engine's; `sink` (not owned) must outlive the source.
  KernelLogXids(KernelLogXidsOptions options, const std::vector<GpuIdentity>& gpus,
                EventSink* sink);
  ~KernelLogXids();

  // Reads what the log holds now (on this thread) and applies the XIDs not applied before.
  void CatchUp();
  // Follows the log from there on its own thread.
  void Start();
  // Ends following; writes down the XIDs that have settled. Idempotent.
  void Stop();
  const KernelLogXidsStats& stats() const { return stats_; }
  // The source in use: the log at `path`, or the journal when the log could not be opened at
  // start and the journal could. Fixed once CatchUp() returns.
  const ReaderStats& reader_stats() const { return reader_->stats(); }
  const std::string& source() const { return source_; }

 private:
  void OnRecord(const Record& record);
  absl::Time RecordTime(const Record& record) const;
  // Writes down the last XID that has settled, if it moved.
  void SaveSettled();
  // Takes the saved replay state as this run's if it is this boot's and `source`'s.
  void UseSavedStateOf(const std::string& source);

  const KernelLogXidsOptions options_;
  EventSink* const sink_;
  std::map<std::string, uint32_t> gpu_by_bus_;  // "00000000:3B:00.0" -> index
  KernelLogXidsStats stats_;
  std::unique_ptr<LogSource> reader_;
  std::string source_;  // reader_->description(), fixed once CatchUp() chose the source
  // The state file as read at construction: boot id, source, last sequence applied.
  struct SavedState {
    std::string boot_id;
    std::string source;
    uint64_t sequence = 0;
  };
  std::optional<SavedState> saved_state_;
  // Reader thread (or CatchUp's caller before Start, or Stop's after the thread ended): replay
  // state and what was logged once.
  std::optional<uint64_t> applied_before_;  // XIDs up to this sequence: applied by an earlier run
  std::optional<uint64_t> saved_;           // the sequence last written down
  std::string reading_;  // the description of the log whose records are being read
  std::deque<std::pair<uint64_t, absl::Time>> unsettled_;  // applied XIDs: sequence, when
  bool catching_up_ = false;
  std::set<std::string> unknown_logged_;
  std::map<std::string, int64_t> last_79_us_;  // bus id -> kernel time of its last XID 79
};

}  // namespace vigil::kmsg
