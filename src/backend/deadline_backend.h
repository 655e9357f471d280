// A Backend wrapper that bounds how long a read may take: every GPU is read on a worker thread of
// its own, the sampling thread waits for all of them up to one deadline, and a GPU whose read has
// not returned by then reads as timed out (DeadlineExceeded) — then and on every later read,
// without waiting again, until the stuck call returns. A driver call that hangs on one GPU thus
// costs the engine one deadline, not its tick loop, and the other GPUs keep being sampled.
//
// A stuck call cannot be cancelled: its worker stays blocked in the driver. At destruction such a
// worker is detached with shared ownership of the inner backend, so nothing it touches is freed
// under it; the process is normally exiting by then.
//
// Thread-safety: ReadAll()/Read() from one sampling thread at a time (Backend's contract; the
// reset worker's ReadProcesses runs while sampling is paused);
// StartEvents/StopEvents are passed through; timeouts() from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"

namespace vigil {

class DeadlineBackend : public Backend {
 public:
  // Precondition: timeout > 0. Starts one worker per GPU of `inner`.
  DeadlineBackend(std::unique_ptr<Backend> inner, absl::Duration timeout);
  ~DeadlineBackend() override;

  std::string_view name() const override { return inner_->name(); }
  const std::vector<GpuIdentity>& gpus() const override { return inner_->gpus(); }
  absl::Status Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                    absl::Span<FieldValue> out) override;
  void ReadAll(absl::Span<const FieldId> fields, absl::Time now, absl::Span<FieldValue> out,
               absl::Span<absl::Status> statuses) override;
  void StartEvents(EventSink* sink) override { inner_->StartEvents(sink); }
  void StopEvents() override { inner_->StopEvents(); }
  // On the GPUs' workers under one deadline, as a read: a listing that hangs in the driver costs
  // one deadline (DeadlineExceeded), and the GPU's worker stays busy until it returns.
  absl::StatusOr<std::vector<GpuProcess>> ReadProcesses(uint32_t gpu) override;
  void ReadProcessesAll(const std::vector<bool>& read,
                        absl::Span<absl::StatusOr<std::vector<GpuProcess>>> out) override;
  // Passed through, unbounded: a reset is bounded by its own command's limit, and the engine's
  // reset worker, not the sampling thread, waits for it.
  absl::StatusOr<std::string> ResetGpu(uint32_t gpu) override { return inner_->ResetGpu(gpu); }
  // MIG calls run on the GPUs' workers, every GPU at once, bounded by one deadline as a read is
  // (a MIG call that hangs in the driver costs one deadline, and the GPU reads as stuck until it
  // returns); DeadlineExceeded while the worker is stuck or when the call misses the deadline.
  // One GPU's instances are read one after another on its worker.
  absl::StatusOr<MigState> ReadMig(uint32_t gpu) override;
  void ReadMigAll(const std::vector<bool>& poll, absl::Span<absl::StatusOr<MigState>> out) override;
  bool TakeMigChangeNotice() override { return inner_->TakeMigChangeNotice(); }
  absl::Status ReadInstance(uint32_t gpu, const MigInstance& instance,
                            absl::Span<const FieldId> fields, absl::Time now,
                            absl::Span<FieldValue> out) override;
  void ReadInstancesAll(absl::Span<const MigState> mig, const std::vector<bool>& read,
                        absl::Span<const FieldId> fields, absl::Time now,
                        absl::Span<FieldValue> out, absl::Span<absl::Status> statuses) override;

  absl::Duration timeout() const { return timeout_; }
  // Waits until gpu's worker has no call in flight, or `deadline`; true if it has none.
  bool AwaitIdle(uint32_t gpu, absl::Time deadline);
  // Reads that did not return within the deadline (each stuck call counts once).
  uint64_t timeouts() const { return timeouts_.load(std::memory_order_relaxed); }

 private:
  // One GPU's worker and its one-slot mailbox.
  struct Worker {
    absl::Mutex mutex;
    bool has_request ABSL_GUARDED_BY(mutex) = false;
    bool busy ABSL_GUARDED_BY(mutex) = false;  // a request is queued or being read
    bool stopping ABSL_GUARDED_BY(mutex) = false;
    std::vector<FieldId> fields ABSL_GUARDED_BY(mutex);
    std::function<void(Backend&)> job ABSL_GUARDED_BY(mutex);  // instead of a read when set
    absl::Time now ABSL_GUARDED_BY(mutex);
    std::vector<FieldValue> values ABSL_GUARDED_BY(mutex);
    absl::Status status ABSL_GUARDED_BY(mutex);
    absl::Time started ABSL_GUARDED_BY(mutex);      // when the current request was handed over
    bool timed_out ABSL_GUARDED_BY(mutex) = false;  // the current request missed its deadline
    std::thread thread;
  };

  static bool IsIdle(Worker* worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(worker->mutex);
  static void RunWorker(std::shared_ptr<Backend> inner, std::shared_ptr<Worker> worker,
                        uint32_t gpu);
  // Hands `job` to gpu's worker: DeadlineExceeded, changing nothing, while its last call is still
  // stuck. The job must own what it writes: after a missed deadline it may still run.
  absl::Status StartJob(uint32_t gpu, std::function<void(Backend&)> job);
  // `call` of every GPU g with which[g] on its worker, all at once, into out[g] under one
  // deadline: what ReadMigAll and ReadProcessesAll share.
  template <typename T>
  void CallEach(const std::vector<bool>& which, absl::Span<absl::StatusOr<T>> out,
                std::function<absl::StatusOr<T>(Backend&, uint32_t)> call);
  // Waits for gpu's worker to finish its job until `deadline`: OK when it ran, DeadlineExceeded
  // when it missed the deadline.
  absl::Status AwaitJob(uint32_t gpu, absl::Time deadline);
  // Waits for `worker` to go idle until `deadline`; false (the request marked timed out and
  // counted) when it did not.
  bool AwaitLocked(Worker& worker, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(worker.mutex);
  // Marks `worker` busy with a request (the caller has put it in); DeadlineExceeded, changing
  // nothing, while its last call is still stuck.
  absl::Status ClaimLocked(Worker& worker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(worker.mutex);
  // Hands the request to gpu's worker; false (with *status set) when it is still stuck.
  bool Dispatch(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                absl::Status* status);
  // Waits for gpu's worker until `deadline` and copies its answer into `out`.
  absl::Status Collect(uint32_t gpu, absl::Time deadline, absl::Span<FieldValue> out);

  const std::shared_ptr<Backend> inner_;
  const absl::Duration timeout_;
  std::vector<std::shared_ptr<Worker>> workers_;  // one per GPU, fixed at construction
  std::vector<char> dispatched_;                  // scratch of ReadAll, sampling thread only
  std::atomic<uint64_t> timeouts_{0};
};

}  // namespace vigil
