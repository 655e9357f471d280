// The flight recorder: when a GPU's verdict turns FAIL, what every field of that GPU did over
// the `window` before (and, once it has passed, the `after` following) goes to the state dir as
// one recording file (api/recording.h), with the GPU's incidents and the engine's identity — the
// evidence a reboot would wipe from memory, for the RMA ticket. The part before is written at
// once (a crash or a reboot right after the FAIL keeps it); the file is written again, complete,
// when `after` has passed. At most `max_recordings` files and `max_bytes` in all: the oldest go.
//
// A GPU whose first verdict is already FAIL (a FAIL restored from the state dir, or an XID from
// before the start) is not recorded again: its recording, if any, was made when it happened.
//
// Threads: the engine's tick thread hands each snapshot to OnTick() (a few comparisons, never
// I/O); one thread of its own (`vigil-recorder`) reads the history and writes the files. A full
// disk or a failed write is logged once per failure streak, counted, and never stops the engine.
// Stop() (or the destructor) writes nothing more and joins the thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/recording.h"
#include "common/env.h"
#include "engine/config.h"
#include "engine/engine.h"

namespace vigil {

struct FlightRecorderOptions {
  std::string dir;  // the recordings' directory (STATE_DIR/recordings); created when missing
  FlightRecorderConfig config;
  Env* env = Env::Default();  // not owned
};

struct FlightRecorderStats {
  std::atomic<uint64_t> recordings{0};      // FAIL turns recorded
  std::atomic<uint64_t> files_written{0};   // writes that succeeded (two per complete recording)
  std::atomic<uint64_t> write_failures{0};  // writes that failed (a full disk...)
  std::atomic<uint64_t> removed{0};         // old recordings removed for the limits
};

class FlightRecorder {
 public:
  // Follows `engine`'s ticks (not owned; outlives the recorder). FailedPrecondition when the
  // engine refuses the subscription.
  static absl::StatusOr<std::unique_ptr<FlightRecorder>> Start(Engine* engine,
                                                               FlightRecorderOptions options);
  ~FlightRecorder();
  void Stop();

  // Waits until every write asked for so far has been done or has failed (tests, shutdown).
  void Flush();
  const FlightRecorderStats& stats() const { return stats_; }
  const std::string& dir() const { return options_.dir; }

 private:
  class TickAdaptor;
  struct Job {
    Recording recording;  // identity and trigger; the series are read when written
  };
  FlightRecorder(Engine* engine, FlightRecorderOptions options);
  // Tick thread.
  void OnTick(const Snapshot& snapshot);
  void Loop();
  // The recorder's thread: reads the history and writes `job`'s file; then the limits.
  void Write(Job job);
  void EnforceLimits(const std::string& keep);

  Engine* const engine_;
  const FlightRecorderOptions options_;
  FlightRecorderStats stats_;
  std::shared_ptr<TickAdaptor> adaptor_;
  std::thread thread_;

  // Tick thread only: each GPU's last status (nullopt before the first tick), and the recordings
  // whose `after` has not passed yet.
  std::vector<std::optional<HealthStatus>> last_status_;
  std::vector<Recording> open_;
  // Writer thread: the files of recordings whose time after is still being recorded; the
  // limits never remove them (their second write would bring them back, the window lost).
  std::set<std::string> open_files_;

  // The recorder's thread: appends to recording->series the GPU's history over [start, end),
  // read in pieces the engine answers.
  absl::Status ReadSeries(absl::Time start, absl::Time end, Recording* recording);
  // The recorder's thread only: whether the last write failed (log once per streak).
  bool failing_ = false;

  absl::Mutex mutex_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mutex_);
  uint64_t queued_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace vigil
