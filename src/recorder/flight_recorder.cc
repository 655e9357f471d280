// Implements the flight recorder: FAIL turns from the ticks, recordings from the history.
#include "recorder/flight_recorder.h"

#include "common/status.h"
#include "common/thread.h"
#include "fields/catalogue.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {

// Hands the engine's ticks to the recorder (on the tick thread). Its mutex is held while a tick
// is handed on, so that Detach() returns only once no tick is being handled: the engine may hold
// the adaptor a moment longer than the recorder lives. Lock order: mutex_ before the recorder's.
class FlightRecorder::TickAdaptor : public TickListener {
 public:
  explicit TickAdaptor(FlightRecorder* recorder) : recorder_(recorder) {}
  void OnMessage(const SnapshotPtr& snapshot) override {
    absl::MutexLock lock(&mutex_);
    if (recorder_ != nullptr) recorder_->OnTick(*snapshot);
  }
  void OnStop(const absl::Status&) override {}
  void Detach() {
    absl::MutexLock lock(&mutex_);
    recorder_ = nullptr;
  }

 private:
  absl::Mutex mutex_;
  FlightRecorder* recorder_ ABSL_GUARDED_BY(mutex_);
};

absl::StatusOr<std::unique_ptr<FlightRecorder>> FlightRecorder::Start(
    Engine* engine, FlightRecorderOptions options) {
  if (absl::Status created = options.env->CreateDir(options.dir); !created.ok()) {
    // Not fatal: the writes will fail and say so, and the engine runs on.
    spdlog::warn("flight recorder: {}; recordings will fail until it can be created",
                 MessageOf(created));
  }
  std::unique_ptr<FlightRecorder> recorder(new FlightRecorder(engine, std::move(options)));
  recorder->adaptor_ = std::make_shared<TickAdaptor>(recorder.get());
  if (absl::Status subscribed = engine->SubscribeTicks(recorder->adaptor_); !subscribed.ok()) {
    recorder->adaptor_->Detach();
    return absl::FailedPreconditionError(
        fmt::format("the flight recorder cannot follow the engine: {}", MessageOf(subscribed)));
  }
  FlightRecorder* self = recorder.get();
  recorder->thread_ = StartNamedThread("vigil-recorder", [self] { self->Loop(); });
  return recorder;
}

FlightRecorder::FlightRecorder(Engine* engine, FlightRecorderOptions options)
    : engine_(engine), options_(std::move(options)), last_status_(engine->gpus().size()) {}

FlightRecorder::~FlightRecorder() { Stop(); }

void FlightRecorder::Stop() {
  if (adaptor_ != nullptr) {
    engine_->UnsubscribeTicks(adaptor_.get());
    adaptor_->Detach();
  }
  {
    absl::MutexLock lock(&mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void FlightRecorder::Flush() {
  absl::MutexLock lock(&mutex_);
  const uint64_t target = queued_;
  auto done = [this, target]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return done_ >= target || stopping_; };
  mutex_.Await(absl::Condition(&done));
}

void FlightRecorder::OnTick(const Snapshot& snapshot) {
  if (snapshot.health == nullptr || options_.config.max_recordings == 0) return;
  std::vector<Job> jobs;
  for (const GpuHealth& gpu : snapshot.health->gpus) {
    if (gpu.gpu >= last_status_.size()) continue;
    std::optional<HealthStatus>& last = last_status_[gpu.gpu];
    const bool turned_fail =
        last.has_value() && *last != HealthStatus::kFail && gpu.status == HealthStatus::kFail;
    last = gpu.status;
    if (!turned_fail) continue;
    const GpuIdentity& identity = engine_->gpus()[gpu.gpu];
    Recording recording{
        .id = fmt::format("{}-gpu{}-s{}", RecordingTimeId(absl::ToUnixMicros(snapshot.time)),
                          gpu.gpu, snapshot.seq),
        .node_name = engine_->identity().node_name,
        .engine_instance = engine_->identity().instance_id,
        .engine_version = engine_->identity().version,
        .backend = engine_->identity().backend,
        .gpu = gpu.gpu,
        .uuid = identity.uuid,
        .gpu_name = identity.name,
        .pci_bus_id = identity.pci_bus_id,
        .serial = identity.serial,
        .trigger_seq = snapshot.seq,
        .trigger_time_us = absl::ToUnixMicros(snapshot.time),
        .window_start_us = absl::ToUnixMicros(snapshot.time - options_.config.window),
        .window_end_us = absl::ToUnixMicros(snapshot.time + options_.config.after)};
    if (snapshot.health_transitions != nullptr) {
      for (const HealthTransition& transition : *snapshot.health_transitions) {
        if (transition.node_level || transition.gpu != gpu.gpu ||
            transition.to != HealthStatus::kFail) {
          continue;
        }
        if (!recording.trigger_summary.empty()) recording.trigger_summary += "; ";
        recording.trigger_summary +=
            fmt::format("{} FAIL: {}", HealthSystemName(transition.system), transition.summary);
      }
    }
    stats_.recordings.fetch_add(1, std::memory_order_relaxed);
    jobs.push_back({recording});  // the part before, at once
    if (options_.config.after > absl::ZeroDuration()) {
      open_.push_back(std::move(recording));
    } else {
      jobs.back().recording.complete = true;
    }
  }
  // Recordings whose time after has passed: written again, complete.
  for (auto it = open_.begin(); it != open_.end();) {
    if (absl::ToUnixMicros(snapshot.time) < it->window_end_us) {
      ++it;
      continue;
    }
    it->complete = true;
    jobs.push_back({std::move(*it)});
    it = open_.erase(it);
  }
  if (jobs.empty()) return;
  absl::MutexLock lock(&mutex_);
  if (stopping_) return;
  for (Job& job : jobs) jobs_.push_back(std::move(job));
  queued_ += jobs.size();
}

void FlightRecorder::Loop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mutex_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stopping_ || !jobs_.empty();
      };
      mutex_.Await(absl::Condition(&ready));
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Write(std::move(job));
    absl::MutexLock lock(&mutex_);
    ++done_;
  }
}

absl::Status FlightRecorder::ReadSeries(absl::Time start, absl::Time end, Recording* recording) {
  // In pieces that each stay well under the engine's limit on one answer
  // (kMaxHistoryResponseSamples): every field of the GPU over an hour and a half at a fast tick
  // would be over it in one.
  const double fields = static_cast<double>(std::max<size_t>(1, engine_->layout().size()));
  const absl::Duration tick = std::max(engine_->config().tick_interval, absl::Milliseconds(1));
  const absl::Duration piece =
      std::max(tick, tick * (static_cast<double>(kMaxHistoryResponseSamples) / 2 / fields));
  for (absl::Time from = start; from < end; from += piece) {
    auto history = engine_->History(
        {.gpus = {recording->gpu}, .start = from, .end = std::min(end, from + piece)});
    if (!history.ok()) return history.status();
    if (recording->series.empty()) {
      for (const HistorySeries& series : *history) {
        const FieldInfo* field = FindField(series.field);
        recording->series.push_back({.field = series.field,
                                     .name = field != nullptr ? std::string(field->name) : "",
                                     .type = field != nullptr ? field->type : FieldType::kInt64});
      }
    }
    if (history->size() != recording->series.size()) {
      return absl::InternalError("the engine's history changed its fields while being read");
    }
    for (size_t i = 0; i < history->size(); ++i) {
      std::vector<RecordingSample>& samples = recording->series[i].samples;
      for (const HistorySample& sample : (*history)[i].samples) {
        // Both ends of a range are inside it: a tick at a piece's end is in the next one too.
        if (!samples.empty() && sample.seq <= samples.back().seq) continue;
        samples.push_back({sample.seq, absl::ToUnixMicros(sample.time), sample.value});
      }
    }
  }
  return absl::OkStatus();
}

void FlightRecorder::Write(Job job) {
  Recording& recording = job.recording;
  const absl::Time now = engine_->clock()->Now();
  // The first write holds the window up to the trigger; the second the whole.
  // Times are kept in microseconds (rounded down): one more makes sure the tick at the end (the
  // one that turned FAIL, for the first write) is inside.
  const absl::Time end = absl::FromUnixMicros(
      (recording.complete ? recording.window_end_us : recording.trigger_time_us) + 1);
  absl::Status written =
      ReadSeries(absl::FromUnixMicros(recording.window_start_us), end, &recording);
  if (written.ok()) {
    const std::shared_ptr<const HealthVerdict> verdict = engine_->Health();
    if (recording.gpu < verdict->gpus.size()) {
      for (const SystemHealth& system : verdict->gpus[recording.gpu].systems) {
        for (const Incident& incident : system.incidents) {
          recording.incidents.push_back({.system = std::string(HealthSystemName(incident.system)),
                                         .status = std::string(HealthStatusName(incident.status)),
                                         .code = incident.code,
                                         .message = incident.message,
                                         .action = incident.action,
                                         .first_seen_us = absl::ToUnixMicros(incident.first_seen),
                                         .last_seen_us = absl::ToUnixMicros(incident.last_seen),
                                         .count = incident.count,
                                         .injected = incident.injected});
        }
      }
    }
    recording.written_us = absl::ToUnixMicros(now);
    const std::string path = fmt::format("{}/{}{}", options_.dir, recording.id, kRecordingSuffix);
    written = WriteFileAtomically(options_.env, path, EncodeRecording(recording));
  }
  if (!written.ok()) {
    stats_.write_failures.fetch_add(1, std::memory_order_relaxed);
    if (!failing_) {
      spdlog::error(
          "flight recorder: cannot write recording {} of GPU {}: {}; the engine goes on "
          "without it",
          recording.id, recording.gpu, MessageOf(written));
    }
    failing_ = true;
    return;
  }
  if (failing_) spdlog::info("flight recorder: writing recordings again");
  failing_ = false;
  stats_.files_written.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("flight recorder: {} recording {} of GPU {} ({} series)",
               recording.complete ? "wrote" : "started", recording.id, recording.gpu,
               recording.series.size());
  const std::string name = recording.id + std::string(kRecordingSuffix);
  if (recording.complete) {
    open_files_.erase(name);
  } else {
    open_files_.insert(name);
  }
  EnforceLimits(name);
}

void FlightRecorder::EnforceLimits(const std::string& keep) {
  auto names = options_.env->ListDir(options_.dir);
  if (!names.ok()) return;
  // Names start with the trigger's time: sorted is oldest first.
  std::vector<std::pair<std::string, uint64_t>> recordings;
  uint64_t total = 0;
  for (const std::string& name : *names) {
    if (!name.ends_with(kRecordingSuffix)) continue;
    auto size = options_.env->FileSize(options_.dir + "/" + name);
    if (!size.ok()) continue;
    recordings.emplace_back(name, *size);
    total += *size;
  }
  // Oldest first, never the one just written nor one whose time after is still being recorded;
  // `left` counts every file still there.
  size_t left = recordings.size();
  for (const auto& [name, size] : recordings) {
    if (left <= options_.config.max_recordings && total <= options_.config.max_bytes) break;
    if (name == keep || open_files_.contains(name)) continue;
    if (options_.env->DeleteFile(options_.dir + "/" + name).ok()) {
      --left;
      total -= size;
      stats_.removed.fetch_add(1, std::memory_order_relaxed);
      spdlog::info("flight recorder: removed {} (at most {} recordings, {} MiB)", name,
                   options_.config.max_recordings, options_.config.max_bytes >> 20);
    }
  }
}

}  // namespace vigil
