// Implements DeadlineBackend: per-GPU workers, one shared deadline per ReadAll.
#include "backend/deadline_backend.h"

#include "common/check.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {

bool DeadlineBackend::IsIdle(Worker* worker) { return !worker->busy; }

DeadlineBackend::DeadlineBackend(std::unique_ptr<Backend> inner, absl::Duration timeout)
    : inner_(std::move(inner)), timeout_(timeout) {
  VIGIL_CHECK(timeout_ > absl::ZeroDuration());
  for (uint32_t gpu = 0; gpu < inner_->gpus().size(); ++gpu) {
    auto worker = std::make_shared<Worker>();
    worker->thread =
        StartNamedThread(fmt::format("vigil-gpu-{}", gpu),
                         [inner = inner_, worker, gpu] { RunWorker(inner, worker, gpu); });
    workers_.push_back(std::move(worker));
  }
  dispatched_.resize(workers_.size());
}

DeadlineBackend::~DeadlineBackend() {
  for (uint32_t gpu = 0; gpu < workers_.size(); ++gpu) {
    Worker& worker = *workers_[gpu];
    bool stuck = false;
    {
      absl::MutexLock lock(&worker.mutex);
      worker.stopping = true;
      stuck = worker.busy;
    }
    if (stuck) {
      spdlog::warn("GPU {}: a driver call is still stuck at shutdown; leaving its thread behind",
                   gpu);
      worker.thread.detach();
    } else {
      worker.thread.join();
    }
  }
}

void DeadlineBackend::RunWorker(std::shared_ptr<Backend> inner, std::shared_ptr<Worker> worker,
                                uint32_t gpu) {
  std::vector<FieldId> fields;
  std::vector<FieldValue> values;
  std::function<void(Backend&)> job;
  for (;;) {
    absl::Time now;
    {
      absl::MutexLock lock(&worker->mutex);
      worker->mutex.Await(absl::Condition(
          +[](Worker* w)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mutex) { return w->has_request || w->stopping; },
          worker.get()));
      if (!worker->has_request) return;  // stopping
      worker->has_request = false;
      job.swap(worker->job);
      fields.swap(worker->fields);
      now = worker->now;
    }
    const bool read = job == nullptr;
    absl::Status status;
    if (read) {
      values.assign(fields.size(), FieldValue{});
      status = inner->Read(gpu, fields, now, absl::MakeSpan(values));
    } else {  // a MIG or process call (CallEach): it keeps its own results
      job(*inner);
      job = nullptr;
    }
    absl::MutexLock lock(&worker->mutex);
    if (read) {
      worker->values.swap(values);
      worker->status = std::move(status);
      worker->fields.swap(fields);  // hand the buffer back for reuse
    }
    worker->busy = false;
    if (worker->timed_out) {
      spdlog::warn("GPU {}: the driver call that timed out returned after {}", gpu,
                   absl::FormatDuration(absl::Now() - worker->started));
    }
  }
}

absl::Status DeadlineBackend::ClaimLocked(Worker& worker) const {
  if (worker.busy) {
    return absl::DeadlineExceededError(fmt::format(
        "a driver call has been stuck for {} (deadline {})",
        absl::FormatDuration(absl::Trunc(absl::Now() - worker.started, absl::Milliseconds(1))),
        absl::FormatDuration(timeout_)));
  }
  worker.has_request = true;
  worker.busy = true;
  worker.timed_out = false;
  worker.started = absl::Now();
  return absl::OkStatus();
}

bool DeadlineBackend::Dispatch(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                               absl::Status* status) {
  Worker& worker = *workers_[gpu];
  absl::MutexLock lock(&worker.mutex);
  *status = ClaimLocked(worker);
  if (!status->ok()) return false;
  worker.fields.assign(fields.begin(), fields.end());  // seen by the worker once we unlock
  worker.now = now;
  return true;
}

absl::Status DeadlineBackend::StartJob(uint32_t gpu, std::function<void(Backend&)> job) {
  Worker& worker = *workers_[gpu];
  absl::MutexLock lock(&worker.mutex);
  if (absl::Status claimed = ClaimLocked(worker); !claimed.ok()) return claimed;
  worker.job = std::move(job);
  return absl::OkStatus();
}

bool DeadlineBackend::AwaitLocked(Worker& worker, absl::Time deadline) {
  if (worker.mutex.AwaitWithDeadline(absl::Condition(&IsIdle, &worker), deadline)) return true;
  worker.timed_out = true;
  timeouts_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

absl::Status DeadlineBackend::AwaitJob(uint32_t gpu, absl::Time deadline) {
  Worker& worker = *workers_[gpu];
  absl::MutexLock lock(&worker.mutex);
  if (AwaitLocked(worker, deadline)) return absl::OkStatus();
  return absl::DeadlineExceededError(fmt::format(
      "the driver did not answer a MIG or process call within {}", absl::FormatDuration(timeout_)));
}

absl::StatusOr<MigState> DeadlineBackend::ReadMig(uint32_t gpu) {
  std::vector<bool> poll(workers_.size(), false);
  poll[gpu] = true;
  std::vector<absl::StatusOr<MigState>> out(workers_.size(), absl::UnknownError("not read"));
  ReadMigAll(poll, absl::MakeSpan(out));
  return std::move(out[gpu]);
}

template <typename T>
void DeadlineBackend::CallEach(const std::vector<bool>& which, absl::Span<absl::StatusOr<T>> out,
                               std::function<absl::StatusOr<T>(Backend&, uint32_t)> call) {
  // Each job owns its result (shared): after a missed deadline it may still run.
  std::vector<std::shared_ptr<absl::StatusOr<T>>> results(workers_.size());
  for (uint32_t gpu = 0; gpu < workers_.size(); ++gpu) {
    if (!which[gpu]) continue;
    auto result = std::make_shared<absl::StatusOr<T>>(absl::UnknownError("not read"));
    const absl::Status started =
        StartJob(gpu, [result, gpu, call](Backend& inner) { *result = call(inner, gpu); });
    if (started.ok()) {
      results[gpu] = std::move(result);
    } else {
      out[gpu] = started;
    }
  }
  const absl::Time deadline = absl::Now() + timeout_;
  for (uint32_t gpu = 0; gpu < workers_.size(); ++gpu) {
    if (results[gpu] == nullptr) continue;
    const absl::Status answered = AwaitJob(gpu, deadline);
    // Written before the worker went idle (under its mutex).
    out[gpu] = answered.ok() ? std::move(*results[gpu]) : absl::StatusOr<T>(answered);
  }
}

void DeadlineBackend::ReadMigAll(const std::vector<bool>& poll,
                                 absl::Span<absl::StatusOr<MigState>> out) {
  CallEach<MigState>(poll, out, [](Backend& inner, uint32_t gpu) { return inner.ReadMig(gpu); });
}

absl::StatusOr<std::vector<GpuProcess>> DeadlineBackend::ReadProcesses(uint32_t gpu) {
  std::vector<bool> read(workers_.size(), false);
  read[gpu] = true;
  std::vector<absl::StatusOr<std::vector<GpuProcess>>> out(workers_.size(),
                                                           absl::UnknownError("not read"));
  ReadProcessesAll(read, absl::MakeSpan(out));
  return std::move(out[gpu]);
}

void DeadlineBackend::ReadProcessesAll(const std::vector<bool>& read,
                                       absl::Span<absl::StatusOr<std::vector<GpuProcess>>> out) {
  CallEach<std::vector<GpuProcess>>(
      read, out, [](Backend& inner, uint32_t gpu) { return inner.ReadProcesses(gpu); });
}

absl::Status DeadlineBackend::ReadInstance(uint32_t gpu, const MigInstance& instance,
                                           absl::Span<const FieldId> fields, absl::Time now,
                                           absl::Span<FieldValue> out) {
  std::vector<MigState> mig(workers_.size());
  mig[gpu].instances = {instance};
  std::vector<bool> read(workers_.size(), false);
  read[gpu] = true;
  absl::Status status;
  ReadInstancesAll(mig, read, fields, now, out, absl::MakeSpan(&status, 1));
  return status;
}

void DeadlineBackend::ReadInstancesAll(absl::Span<const MigState> mig,
                                       const std::vector<bool>& read,
                                       absl::Span<const FieldId> fields, absl::Time now,
                                       absl::Span<FieldValue> out,
                                       absl::Span<absl::Status> statuses) {
  // One GPU's instances, read on its worker; the call owns its inputs and outputs.
  struct Call {
    std::vector<MigInstance> instances;
    std::vector<FieldId> fields;
    std::vector<FieldValue> values;
    std::vector<absl::Status> statuses;
  };
  const size_t width = fields.size();
  std::vector<std::shared_ptr<Call>> calls(workers_.size());
  std::vector<size_t> first_row(workers_.size(), 0);
  size_t row = 0;
  for (uint32_t gpu = 0; gpu < workers_.size(); ++gpu) {
    first_row[gpu] = row;
    const std::vector<MigInstance>& instances = mig[gpu].instances;
    row += instances.size();
    if (!read[gpu] || instances.empty()) continue;
    auto call = std::make_shared<Call>(Call{instances,
                                            {fields.begin(), fields.end()},
                                            std::vector<FieldValue>(instances.size() * width),
                                            std::vector<absl::Status>(instances.size())});
    const absl::Status started = StartJob(gpu, [call, gpu, now](Backend& inner) {
      const size_t width = call->fields.size();
      for (size_t i = 0; i < call->instances.size(); ++i) {
        call->statuses[i] =
            inner.ReadInstance(gpu, call->instances[i], call->fields, now,
                               absl::MakeSpan(call->values).subspan(i * width, width));
      }
    });
    if (started.ok()) {
      calls[gpu] = std::move(call);
    } else {
      std::fill_n(statuses.begin() + first_row[gpu], instances.size(), started);
    }
  }
  const absl::Time deadline = absl::Now() + timeout_;
  for (uint32_t gpu = 0; gpu < workers_.size(); ++gpu) {
    if (calls[gpu] == nullptr) continue;
    const Call& call = *calls[gpu];
    const absl::Status answered = AwaitJob(gpu, deadline);
    if (!answered.ok()) {
      std::fill_n(statuses.begin() + first_row[gpu], call.instances.size(), answered);
      continue;
    }
    std::copy(call.statuses.begin(), call.statuses.end(), statuses.begin() + first_row[gpu]);
    std::copy(call.values.begin(), call.values.end(), out.begin() + first_row[gpu] * width);
  }
}

bool DeadlineBackend::AwaitIdle(uint32_t gpu, absl::Time deadline) {
  Worker& worker = *workers_[gpu];
  absl::MutexLock lock(&worker.mutex);
  return worker.mutex.AwaitWithDeadline(absl::Condition(&IsIdle, &worker), deadline);
}

absl::Status DeadlineBackend::Collect(uint32_t gpu, absl::Time deadline,
                                      absl::Span<FieldValue> out) {
  Worker& worker = *workers_[gpu];
  absl::MutexLock lock(&worker.mutex);
  if (!AwaitLocked(worker, deadline)) {
    return absl::DeadlineExceededError(
        fmt::format("the driver did not answer within {}", absl::FormatDuration(timeout_)));
  }
  std::copy(worker.values.begin(), worker.values.end(), out.begin());
  return worker.status;
}

absl::Status DeadlineBackend::Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                                   absl::Span<FieldValue> out) {
  absl::Status status;
  if (!Dispatch(gpu, fields, now, &status)) return status;
  return Collect(gpu, absl::Now() + timeout_, out);
}

void DeadlineBackend::ReadAll(absl::Span<const FieldId> fields, absl::Time now,
                              absl::Span<FieldValue> out, absl::Span<absl::Status> statuses) {
  for (uint32_t gpu = 0; gpu < workers_.size(); ++gpu) {
    dispatched_[gpu] = Dispatch(gpu, fields, now, &statuses[gpu]);
  }
  const absl::Time deadline = absl::Now() + timeout_;
  for (uint32_t gpu = 0; gpu < workers_.size(); ++gpu) {
    if (!dispatched_[gpu]) continue;
    statuses[gpu] = Collect(gpu, deadline, out.subspan(gpu * fields.size(), fields.size()));
  }
}

}  // namespace vigil
