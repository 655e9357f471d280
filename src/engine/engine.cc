// Implements the Engine: the sampling tick, the caches and request validation.
#include "engine/engine.h"

#include <algorithm>

#include "common/check.h"
#include "common/random_id.h"
#include "common/status.h"
#include "common/version.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

std::shared_ptr<const FieldLayout> MakeLayout() {
  std::vector<const FieldInfo*> fields;
  for (const FieldInfo& field : AllFields()) fields.push_back(&field);
  return std::make_shared<const FieldLayout>(std::move(fields));
}

std::vector<absl::Duration> RequestedIntervals(const FieldLayout& layout,
                                               const EngineConfig& config) {
  std::vector<absl::Duration> intervals;
  for (size_t i = 0; i < layout.size(); ++i) {
    auto it = config.interval_overrides.find(layout.field(i).id);
    intervals.push_back(it != config.interval_overrides.end() ? it->second
                                                              : layout.field(i).default_interval);
  }
  return intervals;
}

std::vector<FieldType> Types(const FieldLayout& layout) {
  std::vector<FieldType> types;
  for (size_t i = 0; i < layout.size(); ++i) types.push_back(layout.field(i).type);
  return types;
}

ValueStatus StatusForGpuFailure(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
      return ValueStatus::kGpuLost;
    case absl::StatusCode::kDeadlineExceeded:
      return ValueStatus::kTimeout;
    case absl::StatusCode::kPermissionDenied:
      return ValueStatus::kNoPermission;
    default:
      return ValueStatus::kReadError;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(EngineOptions options,
                                                       std::unique_ptr<Backend> backend) {
  VIGIL_CHECK(backend != nullptr && options.clock != nullptr);
  if (backend->gpus().empty()) {
    return absl::FailedPreconditionError(
        fmt::format("the {} backend found no GPU", backend->name()));
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(options), std::move(backend)));
  engine->backend_->StartEvents(engine.get());
  return engine;
}

Engine::Engine(EngineOptions options, std::unique_ptr<Backend> backend)
    : options_(std::move(options)),
      backend_(std::move(backend)),
      layout_(MakeLayout()),
      fanout_(options_.max_subscribers),
      schedule_(RequestedIntervals(*layout_, options_.config), options_.config.tick_interval),
      history_(
          static_cast<uint32_t>(backend_->gpus().size()), Types(*layout_),
          [&] {
            std::vector<absl::Duration> scheduled;
            for (size_t i = 0; i < schedule_.size(); ++i) {
              scheduled.push_back(schedule_.interval(i));
            }
            return scheduled;
          }(),
          options_.config.history_max_age) {
  identity_ = EngineIdentity{
      .node_name = options_.node_name,
      .instance_id = RandomInstanceId(),
      .version = std::string(kVersion),
      .backend = std::string(backend_->name()),
      .start_time = options_.clock->Now(),
      .tick_interval = options_.config.tick_interval,
      .history_max_age = options_.config.history_max_age,
  };
  for (size_t i = 0; i < schedule_.size(); ++i) intervals_.push_back(schedule_.interval(i));
  const uint32_t gpu_count = static_cast<uint32_t>(backend_->gpus().size());
  gpu_failing_.assign(gpu_count, false);
  last_xid_.assign(gpu_count, 0);
  auto initial = std::make_shared<Snapshot>();
  initial->gpu_count = gpu_count;
  initial->layout = layout_;
  initial->values.resize(gpu_count * layout_->size());
  latest_ = std::move(initial);
}

Engine::~Engine() {
  backend_->StopEvents();
  fanout_.Stop(absl::UnavailableError("the engine is shutting down"));
}

std::shared_ptr<const Snapshot> Engine::Latest() const {
  absl::MutexLock lock(&latest_mutex_);
  return latest_;
}

void Engine::RunTick() {
  const absl::Time started = absl::Now();
  const absl::Time now = options_.clock->Now();
  const uint64_t seq = ++last_seq_;
  const uint32_t gpu_count = static_cast<uint32_t>(gpus().size());
  schedule_.Due(now, &due_);

  // Split due fields into those read from the backend and those the engine fills from events.
  due_ids_.clear();
  due_index_.clear();
  for (size_t index : due_) {
    if (!layout_->field(index).from_events) {
      due_ids_.push_back(layout_->field(index).id);
      due_index_.push_back(index);
    }
  }
  std::vector<int64_t> last_xid;
  {
    absl::MutexLock lock(&events_mutex_);
    last_xid = last_xid_;
  }

  // Read every GPU first, without holding any lock a reader could wait on.
  const size_t width = due_ids_.size();
  read_buffer_.resize(width * gpu_count);
  for (uint32_t gpu = 0; gpu < gpu_count; ++gpu) {
    const auto values = absl::MakeSpan(read_buffer_).subspan(gpu * width, width);
    const absl::Status read = backend_->Read(gpu, due_ids_, now, values);
    if (!read.ok()) {
      stats_.gpu_read_failures.fetch_add(1, std::memory_order_relaxed);
      if (!gpu_failing_[gpu]) {
        spdlog::error("GPU {} ({}): {}; its values are marked {} until it answers again", gpu,
                      gpus()[gpu].uuid, MessageOf(read),
                      ValueStatusName(StatusForGpuFailure(read)));
        gpu_failing_[gpu] = true;
      }
      std::fill(values.begin(), values.end(), FieldValue::Error(StatusForGpuFailure(read)));
    } else if (gpu_failing_[gpu]) {
      spdlog::warn("GPU {} ({}) answers again", gpu, gpus()[gpu].uuid);
      gpu_failing_[gpu] = false;
    }
  }

  auto next = std::make_shared<Snapshot>(*Latest());
  next->seq = seq;
  next->time = now;
  {
    absl::MutexLock history_lock(&history_mutex_);
    history_.BeginTick(seq, now);
    for (uint32_t gpu = 0; gpu < gpu_count; ++gpu) {
      auto store = [&](size_t index, FieldValue value) {
        history_.Append(gpu, index, value);
        next->values[gpu * layout_->size() + index] = {std::move(value), seq, now};
      };
      for (size_t i = 0; i < width; ++i) store(due_index_[i], read_buffer_[gpu * width + i]);
      for (size_t index : due_) {
        if (layout_->field(index).from_events) store(index, FieldValue::Int(last_xid[gpu]));
      }
    }
    history_.Trim(now);
  }

  std::shared_ptr<const Snapshot> published = std::move(next);
  {
    absl::MutexLock lock(&latest_mutex_);
    latest_ = published;
  }
  stats_.ticks.fetch_add(1, std::memory_order_relaxed);
  fanout_.Publish(published);
  stats_.last_tick_duration_ns.store(absl::ToInt64Nanoseconds(absl::Now() - started),
                                     std::memory_order_relaxed);
}

void Engine::OnXid(const XidEvent& event) {
  if (event.gpu >= gpus().size()) {
    spdlog::error("XID {} reported for unknown GPU {}; ignored", event.xid, event.gpu);
    return;
  }
  stats_.xid_events.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("GPU {} ({}): XID {}{}", event.gpu, gpus()[event.gpu].uuid, event.xid,
               event.injected ? " (injected)" : "");
  absl::MutexLock lock(&events_mutex_);
  last_xid_[event.gpu] = event.xid;
}

absl::StatusOr<std::vector<uint32_t>> Engine::ResolveGpus(
    const std::vector<uint32_t>& gpus_requested) const {
  const uint32_t count = static_cast<uint32_t>(gpus().size());
  if (gpus_requested.size() > kMaxRequestGpus) {
    return absl::InvalidArgumentError(
        fmt::format("{} GPUs requested; at most {}", gpus_requested.size(), kMaxRequestGpus));
  }
  std::vector<uint32_t> resolved;
  if (gpus_requested.empty()) {
    for (uint32_t gpu = 0; gpu < count; ++gpu) resolved.push_back(gpu);
    return resolved;
  }
  for (uint32_t gpu : gpus_requested) {
    if (gpu >= count) {
      return absl::InvalidArgumentError(
          fmt::format("GPU {} does not exist: this engine has {} GPU{} (0-{})", gpu, count,
                      count == 1 ? "" : "s", count - 1));
    }
    if (std::find(resolved.begin(), resolved.end(), gpu) == resolved.end()) {
      resolved.push_back(gpu);
    }
  }
  return resolved;
}

absl::StatusOr<std::vector<size_t>> Engine::ResolveFields(
    const std::vector<FieldId>& fields) const {
  if (fields.size() > kMaxRequestFields) {
    return absl::InvalidArgumentError(
        fmt::format("{} fields requested; at most {}", fields.size(), kMaxRequestFields));
  }
  std::vector<size_t> indexes;
  if (fields.empty()) {
    for (size_t i = 0; i < layout_->size(); ++i) indexes.push_back(i);
    return indexes;
  }
  for (FieldId id : fields) {
    const std::optional<size_t> index = layout_->IndexOf(id);
    if (!index) {
      return absl::InvalidArgumentError(fmt::format(
          "unknown field ID {}: `vigil info --fields` lists the fields this engine samples", id));
    }
    if (std::find(indexes.begin(), indexes.end(), *index) == indexes.end()) {
      indexes.push_back(*index);
    }
  }
  return indexes;
}

absl::StatusOr<std::vector<HistorySeries>> Engine::History(const HistoryRequest& request) const {
  auto gpu_list = ResolveGpus(request.gpus);
  if (!gpu_list.ok()) return gpu_list.status();
  auto field_indexes = ResolveFields(request.fields);
  if (!field_indexes.ok()) return field_indexes.status();
  if (request.start > request.end) {
    return absl::InvalidArgumentError("the history range starts after it ends");
  }
  if (request.max_samples > kMaxHistorySamplesPerSeries) {
    return absl::InvalidArgumentError(fmt::format("max_samples {} is over the limit of {}",
                                                  request.max_samples,
                                                  kMaxHistorySamplesPerSeries));
  }
  const size_t max_samples =
      request.max_samples == 0 ? kMaxHistorySamplesPerSeries : request.max_samples;
  absl::ReaderMutexLock lock(&history_mutex_);
  size_t total = 0;
  for (uint32_t gpu : *gpu_list) {
    for (size_t index : *field_indexes) {
      total += std::min(max_samples, history_.Count(gpu, index, request.start, request.end));
    }
  }
  if (total > kMaxHistoryResponseSamples) {
    return absl::InvalidArgumentError(fmt::format(
        "the request would return {} samples, over the limit of {}: narrow the time range, "
        "the GPUs or the fields, or set max_samples",
        total, kMaxHistoryResponseSamples));
  }
  std::vector<HistorySeries> result;
  for (uint32_t gpu : *gpu_list) {
    for (size_t index : *field_indexes) {
      HistorySeries& series = result.emplace_back();
      series.gpu = gpu;
      series.field = layout_->field(index).id;
      history_.Query(gpu, index, request.start, request.end, max_samples, &series.samples,
                     &series.truncated);
    }
  }
  return result;
}

}  // namespace vigil
