// Implements the Engine: the sampling tick, the caches and request validation.
#include "engine/engine.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/random_id.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "common/version.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

// The process ids of a GPU's processes, each once (a process is listed on its instance too).
absl::StatusOr<std::vector<uint32_t>> Pids(absl::StatusOr<std::vector<GpuProcess>> processes) {
  if (!processes.ok()) return processes.status();
  std::vector<uint32_t> pids;
  for (const GpuProcess& process : *processes) pids.push_back(process.pid);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

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

// An instance's history key: its GPU, GPU instance id and MIG UUID (a recreated instance, with a
// new UUID, starts a new history; two instances never share one).
std::string InstanceKey(uint32_t gpu, const MigInstance& instance) {
  return fmt::format("{}/{}/{}", gpu, instance.gpu_instance_id, instance.uuid);
}

ValueStatus StatusForGpuFailure(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
      return ValueStatus::kGpuLost;
    case absl::StatusCode::kDeadlineExceeded:
      return ValueStatus::kTimeout;
    case absl::StatusCode::kPermissionDenied:
      return ValueStatus::kNoPermission;
    case absl::StatusCode::kFailedPrecondition:  // the backend's "needs a reset"
      return ValueStatus::kResetRequired;
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
  if (absl::Status health = engine->StartHealth(); !health.ok()) return health;
  engine->backend_->StartEvents(engine.get());
  return engine;
}

absl::Status Engine::StartHealth() {
  RestoredHealth restored;
  if (!options_.state_dir.empty()) {
    IncidentStore::Loaded loaded;
    auto store = IncidentStore::Open({.state_dir = options_.state_dir,
                                      .boot_id = options_.boot_id,
                                      .env = options_.env,
                                      .clock = options_.clock},
                                     &loaded);
    if (!store.ok()) return store.status();
    incident_store_ = std::move(*store);
    for (const std::string& problem : loaded.problems) {
      spdlog::error("health state: {} (the other records were kept)", problem);
    }
    if (loaded.rebooted) {
      spdlog::info(
          "health state: the node rebooted since the last run; {} persisted failure(s) "
          "cleared",
          loaded.dropped);
    }
    // Incidents follow the GPU's UUID, not its index, which can change between runs.
    for (Incident& incident : loaded.incidents) {
      if (incident.node_level) {
        spdlog::warn("health state: the node's {} is still FAIL since {}: {} {}",
                     HealthSystemName(incident.system), absl::FormatTime(incident.first_seen),
                     incident.code, incident.message);
        restored.incidents.push_back(std::move(incident));
        continue;
      }
      auto gpu = std::find_if(gpus().begin(), gpus().end(),
                              [&](const GpuIdentity& g) { return g.uuid == incident.uuid; });
      if (gpu == gpus().end()) {
        spdlog::warn("health state: {} is no longer present; its failure ({}) is dropped",
                     incident.uuid, incident.code);
        continue;
      }
      incident.gpu = gpu->index;
      spdlog::warn("health state: GPU {} ({}) is still FAIL since {}: {} {}", incident.gpu,
                   incident.uuid, absl::FormatTime(incident.first_seen), incident.code,
                   incident.message);
      restored.incidents.push_back(std::move(incident));
    }
    restored.clears = std::move(loaded.clears);
  }
  health_ = std::make_unique<HealthEvaluator>(options_.config.health, layout_, gpus(), intervals_,
                                              incident_store_.get(), std::move(restored));
  return absl::OkStatus();
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
          options_.config.history_max_age),
      injections_(layout_, static_cast<uint32_t>(backend_->gpus().size()),
                  options_.config.injection),
      events_(options_.max_subscribers),
      scenarios_(this, {.gpu_count = static_cast<uint32_t>(backend_->gpus().size()),
                        .max_injection = options_.config.injection.max_duration,
                        .check_port = [this](const PortInjectionRequest& request) {
                          return CheckPortInjection(request);
                        }}) {
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
  gpu_read_.assign(gpu_count, ValueStatus::kOk);
  last_xid_.assign(gpu_count, FieldValue::Int(0));
  real_values_.resize(gpu_count * layout_->size());
  mig_read_failing_.assign(gpu_count, false);
  auto instance_fields = std::make_shared<std::vector<size_t>>();
  instance_slot_.resize(layout_->size());
  for (size_t i = 0; i < layout_->size(); ++i) {
    if (!SampledPerMigInstance(layout_->field(i).id)) continue;
    instance_slot_[i] = instance_fields->size();
    instance_fields->push_back(i);
  }
  instance_fields_ = std::move(instance_fields);
  std::vector<MigState> discovered;
  for (const GpuIdentity& gpu : gpus()) discovered.push_back(gpu.mig);
  auto initial = std::make_shared<Snapshot>();
  initial->gpu_count = gpu_count;
  initial->layout = layout_;
  initial->values.resize(gpu_count * layout_->size());
  initial->mig = std::make_shared<const MigTable>(1, std::move(discovered));
  initial->instance_fields = instance_fields_;
  initial->instance_values.resize(initial->mig->rows.size() * instance_fields_->size());
  {
    std::vector<FieldType> types;
    std::vector<absl::Duration> intervals;
    for (size_t index : *instance_fields_) {
      types.push_back(layout_->field(index).type);
      intervals.push_back(schedule_.interval(index));
    }
    absl::MutexLock lock(&history_mutex_);
    instance_history_.emplace(0, std::move(types), std::move(intervals),
                              options_.config.history_max_age);
    AssignInstanceSlots(*initial->mig);
  }
  latest_ = std::move(initial);
}

void Engine::AssignInstanceSlots(const MigTable& mig) {
  std::set<std::string> keys;
  for (size_t row = 0; row < mig.rows.size(); ++row) {
    keys.insert(InstanceKey(mig.rows[row].gpu, mig.instance(row)));
  }
  for (auto it = instance_slots_.begin(); it != instance_slots_.end();) {
    if (keys.contains(it->first)) {
      ++it;
      continue;
    }
    instance_history_->ClearEntity(it->second);  // its history ends with it
    free_instance_slots_.push_back(it->second);
    it = instance_slots_.erase(it);
  }
  instance_row_slots_.clear();
  for (size_t row = 0; row < mig.rows.size(); ++row) {
    auto [slot, added] =
        instance_slots_.try_emplace(InstanceKey(mig.rows[row].gpu, mig.instance(row)), 0);
    if (added) {
      if (free_instance_slots_.empty()) {
        slot->second = instance_history_->AddEntity();
      } else {
        slot->second = free_instance_slots_.back();
        free_instance_slots_.pop_back();
      }
    }
    instance_row_slots_.push_back(slot->second);
  }
}

std::shared_ptr<const MigTable> Engine::PollMig(absl::Time now, const MigTable& current) {
  // Periodically, and at once when the driver tells of a reconfiguration (a driver without
  // MIG-change events is noticed by the poll alone).
  const bool told = backend_->TakeMigChangeNotice();
  if (!told && now - last_mig_poll_ < kMigPollInterval) return nullptr;
  last_mig_poll_ = now;
  std::vector<MigState> states = current.gpus;
  bool changed = false;
  std::vector<bool> poll(states.size());
  for (uint32_t gpu = 0; gpu < states.size(); ++gpu) {
    poll[gpu] = gpu_read_[gpu] == ValueStatus::kOk;  // a GPU that does not answer keeps its state
  }
  std::vector<absl::StatusOr<MigState>> read(states.size(), absl::UnknownError("not read"));
  backend_->ReadMigAll(poll, absl::MakeSpan(read));
  for (uint32_t gpu = 0; gpu < states.size(); ++gpu) {
    if (!poll[gpu]) continue;
    absl::StatusOr<MigState>& state = read[gpu];
    if (!state.ok()) {
      if (!mig_read_failing_[gpu]) {
        spdlog::warn("GPU {} ({}): its MIG state could not be read ({}); keeping the last one", gpu,
                     gpus()[gpu].uuid, MessageOf(state.status()));
      }
      mig_read_failing_[gpu] = true;
      continue;
    }
    mig_read_failing_[gpu] = false;
    if (*state == states[gpu]) continue;
    const std::string message =
        fmt::format("GPU {} ({}): MIG layout changed: {} -> {}", gpu, gpus()[gpu].uuid,
                    DescribeMig(states[gpu]), DescribeMig(*state));
    spdlog::warn("{}", message);
    Record(
        {.kind = EventKind::kMigLayoutChanged, .gpu = static_cast<int>(gpu), .message = message});
    states[gpu] = *std::move(state);
    changed = true;
  }
  if (!changed) return nullptr;
  return std::make_shared<const MigTable>(current.generation + 1, std::move(states));
}

void Engine::ReadInstances(const MigTable& mig, absl::Time now) {
  const size_t width = due_instance_ids_.size();
  instance_buffer_.resize(mig.rows.size() * width);
  if (width == 0 || mig.rows.empty()) return;
  std::vector<bool> read(mig.gpus.size());
  for (uint32_t gpu = 0; gpu < mig.gpus.size(); ++gpu)
    read[gpu] = gpu_read_[gpu] == ValueStatus::kOk;
  instance_statuses_.assign(mig.rows.size(), absl::OkStatus());
  backend_->ReadInstancesAll(mig.gpus, read, due_instance_ids_, now,
                             absl::MakeSpan(instance_buffer_), absl::MakeSpan(instance_statuses_));
  for (size_t row = 0; row < mig.rows.size(); ++row) {
    const uint32_t gpu = mig.rows[row].gpu;
    const auto out = absl::MakeSpan(instance_buffer_).subspan(row * width, width);
    if (!read[gpu]) {  // the GPU's failure is its instances' too
      std::fill(out.begin(), out.end(), FieldValue::Error(gpu_read_[gpu]));
    } else if (!instance_statuses_[row].ok()) {
      std::fill(out.begin(), out.end(),
                FieldValue::Error(StatusForGpuFailure(instance_statuses_[row])));
    }
  }
}

Engine::~Engine() {
  backend_->StopEvents();
  if (const size_t active = injections_.List().size(); active > 0) {
    spdlog::warn(
        "dropping {} active injection(s): injections are not persisted and do not "
        "survive an engine restart",
        active);
  }
  fanout_.Stop(absl::UnavailableError("the engine is shutting down"));
  events_.Stop(absl::UnavailableError("the engine is shutting down"));
}

std::shared_ptr<const Snapshot> Engine::Latest() const {
  absl::MutexLock lock(&latest_mutex_);
  return latest_;
}

void Engine::RunTick() {
  const absl::Time started = absl::Now();  // the tick's cost in real time, for stats only
  const absl::Time now = options_.clock->Now();
  const uint64_t seq = ++last_seq_;
  BeginTick(now);
  const bool reading = PlanReads(now);
  std::vector<FieldValue> last_xid;
  {
    absl::MutexLock lock(&xid_mutex_);
    last_xid = last_xid_;
  }
  ReadGpus(now);
  // MIG: the layout (re-read every kMigPollInterval), then each instance's due fields.
  const std::shared_ptr<const Snapshot> previous = Latest();
  const std::shared_ptr<const MigTable> changed_mig =
      reading ? PollMig(now, *previous->mig) : nullptr;
  const MigTable& mig = changed_mig != nullptr ? *changed_mig : *previous->mig;
  PlanInstanceReads(changed_mig != nullptr);
  ReadInstances(mig, now);
  std::shared_ptr<const std::vector<GpuProcessList>> processes =
      reading ? ReadProcesses() : nullptr;
  if (reading) {
    absl::MutexLock lock(&sampling_mutex_);
    reads_in_flight_ = false;
  }
  KeepRealValues();
  std::shared_ptr<Snapshot> next = NextSnapshot(*previous, changed_mig, seq, now);
  if (processes != nullptr) next->processes = std::move(processes);
  StoreTick(next.get(), last_xid, mig, changed_mig != nullptr);
  stats_.ticks.fetch_add(1, std::memory_order_relaxed);
  next->counters = Counters();  // before health: the kernel log's state is an input
  JudgeAndPublish(std::move(next), now);
  stats_.last_tick_duration_ns.store(absl::ToInt64Nanoseconds(absl::Now() - started),
                                     std::memory_order_relaxed);
}

void Engine::BeginTick(absl::Time now) {
  scenarios_.Advance(now);
  ApplyHeldUnknownXids(now);
  for (InjectionRecord& expired : injections_.Expire(now)) {
    Record({.kind = EventKind::kInjectionExpired,
            .gpu = expired.EventGpu(),
            .injected = true,
            .injection = expired,
            .message =
                fmt::format("{} ended: {}; real readings resume", expired.id, expired.Describe())});
  }
}

bool Engine::PlanReads(absl::Time now) {
  schedule_.Due(now, &due_);
  // Injected (GPU, field)s are read every tick, whatever their interval, so an injection shows
  // from the next tick and the real value returns at the first tick after it ends.
  std::set<size_t> forced;
  injections_.ForcedFields(&forced);
  if (!forced.empty()) {
    forced.insert(due_.begin(), due_.end());
    due_.assign(forced.begin(), forced.end());
  }
  // Split due fields into those read from the backend and those the engine fills from events.
  due_ids_.clear();
  due_index_.clear();
  for (size_t index : due_) {
    if (!layout_->field(index).from_events) {
      due_ids_.push_back(layout_->field(index).id);
      due_index_.push_back(index);
    }
  }
  bool reading = false;
  {
    absl::MutexLock lock(&sampling_mutex_);
    reading = !sampling_paused_;
    reads_in_flight_ = reading;
  }
  if (!reading) {  // a GPU reset is under way: nothing from the backend this tick
    due_ids_.clear();
    due_index_.clear();
  }
  return reading;
}

void Engine::ReadGpus(absl::Time now) {
  // Every GPU first, without holding any lock a reader could wait on.
  const uint32_t gpu_count = static_cast<uint32_t>(gpus().size());
  const size_t width = due_ids_.size();
  read_buffer_.resize(width * gpu_count);
  read_statuses_.resize(gpu_count);
  // With nothing due (a tick shorter than every field's interval) there is nothing to learn
  // about the GPUs: their read status stays as the last read left it.
  if (width == 0) return;
  backend_->ReadAll(due_ids_, now, absl::MakeSpan(read_buffer_), absl::MakeSpan(read_statuses_));
  for (uint32_t gpu = 0; gpu < gpu_count; ++gpu) NoteGpuRead(gpu, read_statuses_[gpu]);
}

std::shared_ptr<const std::vector<GpuProcessList>> Engine::ReadProcesses() {
  if (std::find(due_ids_.begin(), due_ids_.end(), fid::kGpuUtil) == due_ids_.end()) {
    return nullptr;
  }
  const uint32_t gpu_count = static_cast<uint32_t>(gpus().size());
  std::vector<bool> read(gpu_count);
  for (uint32_t gpu = 0; gpu < gpu_count; ++gpu) read[gpu] = gpu_read_[gpu] == ValueStatus::kOk;
  std::vector<absl::StatusOr<std::vector<GpuProcess>>> out(gpu_count,
                                                           absl::UnknownError("not read"));
  backend_->ReadProcessesAll(read, absl::MakeSpan(out));
  process_read_failing_.resize(gpu_count, false);
  auto lists = std::make_shared<std::vector<GpuProcessList>>(gpu_count);
  for (uint32_t gpu = 0; gpu < gpu_count; ++gpu) {
    if (!read[gpu]) continue;  // the GPU's read failed: said once by NoteGpuRead
    if (out[gpu].ok()) {
      (*lists)[gpu] = {.known = true, .processes = *std::move(out[gpu])};
      if (process_read_failing_[gpu]) {
        spdlog::info("GPU {} ({}): its compute processes are listed again", gpu, gpus()[gpu].uuid);
      }
      process_read_failing_[gpu] = false;
      continue;
    }
    stats_.process_read_failures.fetch_add(1, std::memory_order_relaxed);
    if (!process_read_failing_[gpu]) {  // once per failure, not every tick
      spdlog::warn(
          "GPU {} ({}): its compute processes cannot be listed ({}); per-process "
          "series are left out until they can",
          gpu, gpus()[gpu].uuid, MessageOf(out[gpu].status()));
    }
    process_read_failing_[gpu] = true;
  }
  return lists;
}

void Engine::PlanInstanceReads(bool mig_changed) {
  due_instance_ids_.clear();
  due_instance_k_.clear();
  if (mig_changed) {  // new instances get every field now, not at its next interval
    for (size_t k = 0; k < instance_fields_->size(); ++k) {
      due_instance_ids_.push_back(layout_->field((*instance_fields_)[k]).id);
      due_instance_k_.push_back(k);
    }
    return;
  }
  for (size_t i = 0; i < due_ids_.size(); ++i) {
    if (const auto k = instance_slot_[due_index_[i]]) {
      due_instance_ids_.push_back(due_ids_[i]);
      due_instance_k_.push_back(*k);
    }
  }
}

void Engine::KeepRealValues() {
  const size_t width = due_ids_.size();
  absl::MutexLock lock(&real_mutex_);
  for (uint32_t gpu = 0; gpu < gpus().size(); ++gpu) {
    for (size_t i = 0; i < width; ++i) {
      real_values_[gpu * layout_->size() + due_index_[i]] = read_buffer_[gpu * width + i];
    }
  }
}

std::shared_ptr<Snapshot> Engine::NextSnapshot(const Snapshot& previous,
                                               const std::shared_ptr<const MigTable>& changed_mig,
                                               uint64_t seq, absl::Time now) {
  auto next = std::make_shared<Snapshot>(previous);
  const size_t instance_width = instance_fields_->size();
  if (changed_mig != nullptr) {
    // An instance that stays keeps its values; a new one starts with none.
    std::vector<LatestValue> values(changed_mig->rows.size() * instance_width);
    for (size_t row = 0; row < changed_mig->rows.size(); ++row) {
      const MigTable::Row& at = changed_mig->rows[row];
      const auto old = previous.mig->RowOf(at.gpu, changed_mig->instance(row).gpu_instance_id);
      if (old && previous.mig->instance(*old).uuid == changed_mig->instance(row).uuid) {
        std::copy_n(previous.instance_values.begin() + *old * instance_width, instance_width,
                    values.begin() + row * instance_width);
      }
    }
    next->mig = changed_mig;
    next->instance_values = std::move(values);
  }
  next->seq = seq;
  next->time = now;
  next->gpu_read = gpu_read_;
  // Only while something is injected (an empty list allows nothing): no work on a plain tick.
  next->injection_allows_actions.clear();
  const std::vector<InjectionRecord> port_injections =
      sources_.empty() ? std::vector<InjectionRecord>() : injections_.PortInjections();
  if (!injections_.Empty() || !port_injections.empty()) {
    next->injection_allows_actions = injections_.ActionGpus(static_cast<uint32_t>(gpus().size()));
    // A port's drill lets actions follow on the GPUs the port serves.
    const std::vector<NicPortEntity> ports =
        port_injections.empty() ? std::vector<NicPortEntity>() : NicPorts();
    for (const InjectionRecord& record : port_injections) {
      if (!record.allow_actions) continue;
      for (const NicPortEntity& port : ports) {
        if (port.name != record.nic_port) continue;
        for (uint32_t gpu : port.gpus) {
          if (gpu < next->injection_allows_actions.size()) {
            next->injection_allows_actions[gpu] = true;
          }
        }
      }
    }
  }
  return next;
}

void Engine::StoreTick(Snapshot* next, const std::vector<FieldValue>& last_xid, const MigTable& mig,
                       bool mig_changed) {
  const uint64_t seq = next->seq;
  const absl::Time now = next->time;
  const size_t width = due_ids_.size();
  const bool injecting = !injections_.Empty();
  absl::MutexLock history_lock(&history_mutex_);
  history_.BeginTick(seq, now);
  for (uint32_t gpu = 0; gpu < gpus().size(); ++gpu) {
    auto store = [&](size_t index, FieldValue value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(history_mutex_) {
      if (injecting) injections_.Apply(gpu, index, &value);
      history_.Append(gpu, index, value);
      next->values[gpu * layout_->size() + index] = {std::move(value), seq, now};
    };
    for (size_t i = 0; i < width; ++i) store(due_index_[i], read_buffer_[gpu * width + i]);
    for (size_t index : due_) {
      if (layout_->field(index).from_events) store(index, last_xid[gpu]);
    }
  }
  history_.Trim(now);
  if (mig_changed) AssignInstanceSlots(mig);
  // From the first instance on, every tick (a store's ticks are consecutive); never without MIG.
  if (instance_history_->entity_count() == 0) return;
  instance_history_->BeginTick(seq, now);
  const size_t instance_width = instance_fields_->size();
  const size_t width_due = due_instance_ids_.size();
  for (size_t row = 0; row < mig.rows.size(); ++row) {
    for (size_t i = 0; i < width_due; ++i) {
      const FieldValue& value = instance_buffer_[row * width_due + i];
      instance_history_->Append(instance_row_slots_[row], due_instance_k_[i], value);
      next->instance_values[row * instance_width + due_instance_k_[i]] = {value, seq, now};
    }
  }
  instance_history_->Trim(now);
}

void Engine::AddHealthSource(std::unique_ptr<HealthSource> source) {
  VIGIL_CHECK(last_seq_ == 0);  // before the first tick
  for (HealthSystem system : source->systems()) {
    health_->AttachSource(system);
    if (IsNodeLevel(system)) {
      source->Cleared(std::nullopt, health_->LastClear(std::nullopt, system));
      continue;
    }
    for (uint32_t gpu = 0; gpu < gpus().size(); ++gpu) {
      source->Cleared(gpu, health_->LastClear(gpu, system));
    }
  }
  sources_.push_back(std::move(source));
}

bool Engine::HealthCountsRecord(std::optional<uint32_t> gpu, const std::string& key,
                                const LogPosition& position) const {
  return health_->CountsRecord(gpu, key, position);
}

std::vector<NicPortEntity> Engine::NicPorts() const {
  std::vector<NicPortEntity> ports;
  for (const std::unique_ptr<HealthSource>& source : sources_) {  // fixed since the first tick
    std::vector<NicPortEntity> more = source->NicPorts();
    ports.insert(ports.end(), std::make_move_iterator(more.begin()),
                 std::make_move_iterator(more.end()));
  }
  return ports;
}

void Engine::JudgeAndPublish(std::shared_ptr<Snapshot> next, absl::Time now) {
  // The sources read (sysfs) with no lock held; their reports join this tick's verdict.
  std::vector<SourceReport> reports;
  reports.reserve(sources_.size());
  const std::vector<PortFieldInjection> port_injections =
      sources_.empty() ? std::vector<PortFieldInjection>() : PortInjections();
  for (const std::unique_ptr<HealthSource>& source : sources_) {
    source->SetPortInjections(port_injections);
    std::vector<SourceReport> more = source->Judge(now);
    reports.insert(reports.end(), std::make_move_iterator(more.begin()),
                   std::make_move_iterator(more.end()));
  }
  if (!sources_.empty()) {
    next->nic_ports = std::make_shared<const std::vector<NicPortEntity>>(NicPorts());
  }
  // Health from the same snapshot, so the verdict carries this tick's seq.
  auto transitions = std::make_shared<std::vector<HealthTransition>>();
  next->health = health_->Evaluate(*next, now, transitions.get(), std::move(reports));
  next->health_transitions = transitions;
  std::shared_ptr<const Snapshot> published = std::move(next);
  {
    absl::MutexLock lock(&latest_mutex_);
    latest_ = published;
  }
  fanout_.Publish(published);
  for (const HealthTransition& transition : *transitions) {
    const std::string subject = transition.node_level
                                    ? "node"
                                    : fmt::format("GPU {} ({})", transition.gpu, transition.uuid);
    Record(
        {.kind = EventKind::kHealthTransition,
         .gpu = transition.node_level ? -1 : static_cast<int>(transition.gpu),
         .injected = transition.injected,
         .message = fmt::format("{} {}: {} -> {}{}{}", subject, HealthSystemName(transition.system),
                                HealthStatusName(transition.from), HealthStatusName(transition.to),
                                transition.summary.empty() ? "" : ": ", transition.summary)});
  }
}

void Engine::NoteGpuRead(uint32_t gpu, const absl::Status& read) {
  const bool was_failing = gpu_read_[gpu] != ValueStatus::kOk;
  if (read.ok()) {
    if (was_failing) spdlog::warn("GPU {} ({}) answers again", gpu, gpus()[gpu].uuid);
    gpu_read_[gpu] = ValueStatus::kOk;
    return;
  }
  stats_.gpu_read_failures.fetch_add(1, std::memory_order_relaxed);
  if (read.code() == absl::StatusCode::kDeadlineExceeded) {
    stats_.gpu_read_timeouts.fetch_add(1, std::memory_order_relaxed);
  }
  gpu_read_[gpu] = StatusForGpuFailure(read);
  if (!was_failing) {  // once per failure, not every tick
    spdlog::error("GPU {} ({}): {}; its values are marked {} until it answers again", gpu,
                  gpus()[gpu].uuid, MessageOf(read), ValueStatusName(gpu_read_[gpu]));
  }
  const size_t width = due_ids_.size();
  std::fill_n(read_buffer_.begin() + gpu * width, width, FieldValue::Error(gpu_read_[gpu]));
}

Snapshot::Counters Engine::Counters() const {
  Snapshot::Counters counters{
      .ticks = stats_.ticks.load(std::memory_order_relaxed),
      .gpu_read_failures = stats_.gpu_read_failures.load(std::memory_order_relaxed),
      .gpu_read_timeouts = stats_.gpu_read_timeouts.load(std::memory_order_relaxed),
      .xid_events = stats_.xid_events.load(std::memory_order_relaxed),
      .xid_duplicates = stats_.xid_duplicates.load(std::memory_order_relaxed),
      .process_read_failures = stats_.process_read_failures.load(std::memory_order_relaxed)};
  if (incident_store_ != nullptr) {
    const IncidentStore::Stats persisted = incident_store_->stats();
    counters.persistence_pending = persisted.pending;
    counters.persistence_lag = persisted.lag;
    counters.persistence_failures = persisted.failures;
  }
  if (external_counters_) external_counters_(&counters);
  return counters;
}

void Engine::OnXid(const XidEvent& event) {
  if (event.gpu >= gpus().size()) {
    spdlog::error("XID {} reported for unknown GPU {}; ignored", event.xid, event.gpu);
    return;
  }
  const bool from_log = event.source == XidSource::kKernelLog;
  if (from_log && event.log_position.has_value() &&
      health_->CountsXidRecord(event.gpu, event.xid, *event.log_position)) {
    // Read again after a restart: the persisted incident already counts this record.
    stats_.xid_duplicates.fetch_add(1, std::memory_order_relaxed);
    spdlog::info("GPU {}: XID {} of the kernel log ({} record {}) already counted before a restart",
                 event.gpu, event.xid, event.log_position->source, event.log_position->sequence);
    return;
  }
  if (!event.injected) {
    absl::MutexLock lock(&xid_mutex_);
    if (!from_log && event.xid == kUnknownXid) {
      // NVML could not name the code; the kernel log's line for the same event does.
      if (TakeUnmatchedLogReport(event.gpu, event.time)) {
        stats_.xid_duplicates.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("GPU {}: NVML's unknown XID is the kernel log's XID; counted once",
                      event.gpu);
        return;
      }
      held_unknown_xids_.push_back(event);
      if (held_unknown_xids_.size() > 256) held_unknown_xids_.pop_front();  // a storm
      return;
    }
    if (from_log && TakeHeldUnknownXid(event.gpu, event.time)) {
      // NVML's report of this XID, as 999: one XID, under the code the log names.
      stats_.xid_duplicates.fetch_add(1, std::memory_order_relaxed);
    } else {
      std::deque<SeenXid>& unmatched = unmatched_xids_[{event.gpu, event.xid}];
      while (!unmatched.empty() && event.time - unmatched.front().time > kXidMergeWindow) {
        unmatched.pop_front();
      }
      for (auto it = unmatched.begin(); it != unmatched.end(); ++it) {
        if (it->source != event.source &&
            absl::AbsDuration(event.time - it->time) <= kXidMergeWindow) {
          // The other source's report of an XID already counted. Its incident keeps the log's
          // record, so a restart does not count the XID again from the log.
          unmatched.erase(it);
          if (from_log && event.log_position.has_value()) {
            health_->NoteXidRecord(event.gpu, event.xid, *event.log_position);
          }
          stats_.xid_duplicates.fetch_add(1, std::memory_order_relaxed);
          spdlog::debug("GPU {}: XID {} also reported by {}; counted once", event.gpu, event.xid,
                        from_log ? "the kernel log" : "NVML's events");
          return;
        }
      }
      unmatched.push_back({event.time, event.source});
      if (unmatched.size() > 256) unmatched.pop_front();  // a storm from one source
    }
  }
  ApplyReported(event);
}

bool Engine::TakeUnmatchedLogReport(uint32_t gpu, absl::Time time) {
  std::deque<SeenXid>* oldest_in = nullptr;
  std::deque<SeenXid>::iterator oldest;
  for (auto it = unmatched_xids_.lower_bound({gpu, 0});
       it != unmatched_xids_.end() && it->first.first == gpu; ++it) {
    for (auto seen = it->second.begin(); seen != it->second.end(); ++seen) {
      if (seen->source != XidSource::kKernelLog ||
          absl::AbsDuration(time - seen->time) > kXidMergeWindow) {
        continue;
      }
      if (oldest_in == nullptr || seen->time < oldest->time) {
        oldest_in = &it->second;
        oldest = seen;
      }
      break;  // each deque is oldest first
    }
  }
  if (oldest_in == nullptr) return false;
  oldest_in->erase(oldest);
  return true;
}

bool Engine::TakeHeldUnknownXid(uint32_t gpu, absl::Time time) {
  for (auto it = held_unknown_xids_.begin(); it != held_unknown_xids_.end(); ++it) {
    if (it->gpu == gpu && absl::AbsDuration(time - it->time) <= kXidMergeWindow) {
      held_unknown_xids_.erase(it);
      return true;
    }
  }
  return false;
}

void Engine::ApplyHeldUnknownXids(absl::Time now) {
  std::vector<XidEvent> due;
  {
    absl::MutexLock lock(&xid_mutex_);
    while (!held_unknown_xids_.empty() &&
           now - held_unknown_xids_.front().time >= kUnknownXidHold) {
      due.push_back(std::move(held_unknown_xids_.front()));
      held_unknown_xids_.pop_front();
    }
  }
  for (const XidEvent& event : due) ApplyReported(event);
}

void Engine::ApplyReported(const XidEvent& event) {
  const bool from_log = event.source == XidSource::kKernelLog;
  const std::string instance = InGpuInstance(Mig()->gpus[event.gpu].instances, event.gpu_instance);
  ApplyXid(event.gpu, event.xid, event.time, event.injected, instance, event.log_position,
           {.message = fmt::format("GPU {} ({}): XID {}{}{}{}", event.gpu, gpus()[event.gpu].uuid,
                                   event.xid, instance, from_log ? " (kernel log)" : "",
                                   event.detail.empty() ? "" : ": " + event.detail)});
}

void Engine::OnSxid(const SxidEvent& event) {
  // The sources were all added before the kernel log started: sources_ does not change now.
  bool counted_before = false;
  for (const std::unique_ptr<HealthSource>& source : sources_) {
    counted_before |= !source->OnSxid(event);
  }
  if (counted_before) return;  // the source said so
  Record({.time = event.time,
          .kind = EventKind::kSxid,
          .sxid = event,
          .message = fmt::format("NVSwitch {} ({}): SXid {} ({}){}{}", event.nvswitch,
                                 event.pci_bus_id, event.sxid, event.fatal ? "fatal" : "non-fatal",
                                 event.detail.empty() ? "" : ": ", event.detail)});
}

void Engine::ApplyXid(uint32_t gpu, uint32_t xid, absl::Time time, bool injected, std::string where,
                      std::optional<LogPosition> log_position, EngineEvent event) {
  stats_.xid_events.fetch_add(1, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&xid_mutex_);
    last_xid_[gpu] = FieldValue::Int(xid);
    last_xid_[gpu].injected = injected;
  }
  health_->RecordXid(gpu, xid, time, injected,
                     /*actions_allowed=*/event.injection && event.injection->allow_actions,
                     std::move(where), std::move(log_position));
  event.kind = EventKind::kXid;
  event.time = time;  // when the driver reported it: earlier than now for one from the log
  event.gpu = static_cast<int>(gpu);
  event.xid = xid;
  event.xid_rule = options_.config.health.RuleFor(xid);
  event.xid_known = options_.config.health.xids.contains(xid);
  event.injected = injected;
  Record(std::move(event));
}

EventPtr Engine::Record(EngineEvent event) {
  if (event.time == absl::Time()) event.time = options_.clock->Now();
  event.seq = Latest()->seq;
  return events_.Record(std::move(event));
}

std::vector<std::string> Engine::RecordCleared(const std::vector<InjectionRecord>& cleared,
                                               const Principal& who, std::string_view why) {
  for (const InjectionRecord& record : cleared) {
    Record({.kind = EventKind::kInjectionCleared,
            .gpu = record.EventGpu(),
            .injected = true,
            .injection = record,
            .principal = who,
            .message = fmt::format("{} cleared ({}): {}; real readings resume", record.id, why,
                                   record.Describe())});
  }
  std::vector<std::string> ids;
  for (const InjectionRecord& record : cleared) ids.push_back(record.id);
  return ids;
}

absl::StatusOr<InjectionRecord> Engine::InjectField(const FieldInjectionRequest& request,
                                                    const Principal& principal) {
  FieldValue real;
  if (const auto index = layout_->IndexOf(request.field); index && request.gpu < gpus().size()) {
    absl::MutexLock lock(&real_mutex_);
    real = real_values_[request.gpu * layout_->size() + *index];
  }
  std::optional<InjectionRecord> superseded;
  auto record = injections_.AddField(request, real, principal, options_.clock->Now(), &superseded);
  if (record.ok()) RecordStarted(*record, superseded, principal);
  return record;
}

void Engine::RecordStarted(const InjectionRecord& record,
                           const std::optional<InjectionRecord>& superseded,
                           const Principal& principal) {
  if (superseded) RecordCleared({*superseded}, principal, "superseded by " + record.id);
  Record({.kind = EventKind::kInjectionStarted,
          .gpu = record.EventGpu(),
          .injected = true,
          .injection = record,
          .principal = principal,
          .message = fmt::format("{}: {}{}", record.id, record.Describe(),
                                 record.scenario_id.empty() ? "" : " in " + record.scenario_id)});
}

absl::Status Engine::CheckPortInjection(const PortInjectionRequest& request) const {
  const std::vector<NicPortEntity> ports = NicPorts();
  if (ports.empty()) {
    return absl::FailedPreconditionError(
        "this engine reads no NIC ports: give it a --sysfs-root with InfiniBand or RoCE ports (on "
        "the sim backend, --sim-nics N)");
  }
  const PortFieldInjection injection{
      .port = request.port, .field = request.field, .value = request.value, .add = request.add};
  for (const std::unique_ptr<HealthSource>& source : sources_) {  // fixed since the first tick
    absl::Status checked = source->CheckPortInjection(injection);
    if (!absl::IsNotFound(checked)) return checked;
  }
  std::string names;
  for (const NicPortEntity& port : ports) names += (names.empty() ? "" : ", ") + port.name;
  return absl::NotFoundError(fmt::format(
      "the node has no NIC port {}: its ports are {} (vigil discovery)", request.port, names));
}

absl::StatusOr<InjectionRecord> Engine::InjectPort(const PortInjectionRequest& request,
                                                   const Principal& principal) {
  if (absl::Status checked = CheckPortInjection(request); !checked.ok()) return checked;
  std::optional<InjectionRecord> superseded;
  auto record = injections_.AddPort(request, principal, options_.clock->Now(), &superseded);
  if (record.ok()) RecordStarted(*record, superseded, principal);
  return record;
}

std::vector<PortFieldInjection> Engine::PortInjections() const {
  std::vector<PortFieldInjection> injections;
  for (const InjectionRecord& record : injections_.PortInjections()) {
    PortFieldInjection& injection = injections.emplace_back(
        PortFieldInjection{.id = record.id, .port = record.nic_port, .field = record.port_field});
    if (record.mode == InjectionMode::kAdd) {
      injection.add = record.add;
    } else {
      injection.value = record.value.numeric();
    }
  }
  return injections;
}

absl::StatusOr<InjectionRecord> Engine::InjectXid(const XidInjectionRequest& request,
                                                  const Principal& principal) {
  if (request.gpu_instance.has_value() && request.gpu < gpus().size()) {
    const MigState& state = Mig()->gpus[request.gpu];
    std::string ids;
    bool found = false;
    for (const MigInstance& instance : state.instances) {
      ids += fmt::format("{}{}", ids.empty() ? "" : ", ", instance.gpu_instance_id);
      found |= instance.gpu_instance_id == *request.gpu_instance;
    }
    if (!found) {
      return absl::InvalidArgumentError(
          state.mode ? fmt::format("GPU {} has no GPU instance {}: its instances are {}",
                                   request.gpu, *request.gpu_instance, ids)
                     : fmt::format("GPU {} is not in MIG mode: it has no GPU instance {}",
                                   request.gpu, *request.gpu_instance));
    }
  }
  auto record = injections_.MakeXid(request, principal, options_.clock->Now());
  if (!record.ok()) return record.status();
  const uint32_t gpu = request.gpu, xid = request.xid;
  const std::string& scenario_id = request.scenario_id;
  const std::string instance = InGpuInstance(Mig()->gpus[gpu].instances, request.gpu_instance);
  // The same event a real XID produces, flagged injected and signed.
  ApplyXid(gpu, xid, record->start, /*injected=*/true, instance, /*log_position=*/std::nullopt,
           {.injection = *record,
            .principal = principal,
            .message = fmt::format("GPU {} ({}): XID {}{} (injected, {}{})", gpu, gpus()[gpu].uuid,
                                   xid, instance, record->id,
                                   scenario_id.empty() ? "" : " in " + scenario_id)});
  return record;
}

absl::StatusOr<ScenarioRun> Engine::RunScenario(std::string_view yaml_text, std::string_view source,
                                                const Principal& principal) {
  return scenarios_.Start(yaml_text, source, principal, options_.clock->Now());
}

std::vector<std::string> Engine::ClearScenarioInjections(const std::string& scenario_id,
                                                         const Principal& who,
                                                         std::string_view why) {
  return RecordCleared(injections_.ClearScenario(scenario_id), who, why);
}

std::vector<std::string> Engine::ClearFieldInjection(uint32_t gpu, FieldId field,
                                                     const Principal& who, std::string_view why) {
  return RecordCleared(injections_.ClearField(gpu, field), who, why);
}

std::vector<std::string> Engine::ClearPortInjection(const std::string& port,
                                                    const std::string& field, const Principal& who,
                                                    std::string_view why) {
  return RecordCleared(injections_.ClearPortField(port, field), who, why);
}

void Engine::AuditScenario(ScenarioTarget::Audit what, const Principal& who, std::string message) {
  const EventKind kind = what == Audit::kStarted ? EventKind::kScenarioStarted
                         : what == Audit::kStep  ? EventKind::kScenarioStep
                                                 : EventKind::kScenarioEnded;
  Record({.kind = kind, .injected = true, .principal = who, .message = std::move(message)});
}

absl::StatusOr<std::vector<std::string>> Engine::Clear(const std::string& id, bool all,
                                                       const Principal& principal) {
  std::vector<std::string> cleared;
  if (all || id.starts_with("scn-")) {
    auto cancelled = scenarios_.Cancel(id, all, principal);
    if (!cancelled.ok()) return cancelled.status();
    cleared = std::move(*cancelled);
  }
  if (all) {
    const std::vector<InjectionRecord> records = injections_.ClearAll();
    RecordCleared(records, principal, "clear --all");
    for (const InjectionRecord& record : records) cleared.push_back(record.id);
  } else if (!id.starts_with("scn-")) {
    auto record = injections_.Clear(id);
    if (!record.ok()) return record.status();
    RecordCleared({*record}, principal, "cleared by request");
    cleared.push_back(record->id);
  }
  return cleared;
}

std::shared_ptr<const HealthVerdict> Engine::Health() const {
  const auto latest = Latest();
  return latest->health != nullptr ? latest->health : health_->Latest();
}

absl::StatusOr<std::vector<Incident>> Engine::ClearHealth(std::optional<uint32_t> gpu,
                                                          std::optional<HealthSystem> system,
                                                          const Principal& principal) {
  if (gpu && *gpu >= gpus().size()) {
    return absl::InvalidArgumentError(
        fmt::format("GPU {} does not exist: this engine has {} GPU{} (0-{})", *gpu, gpus().size(),
                    gpus().size() == 1 ? "" : "s", gpus().size() - 1));
  }
  if (system && gpu && IsNodeLevel(*system)) {
    return absl::InvalidArgumentError(
        fmt::format("{} is a node-level system, not a GPU's: clear it for the node (vigil "
                    "health clear --node)",
                    HealthSystemName(*system)));
  }
  if (system && !gpu && !IsNodeLevel(*system)) {
    return absl::InvalidArgumentError(
        fmt::format("{} is a GPU's system: clear it for a GPU (vigil health clear --gpu N)",
                    HealthSystemName(*system)));
  }
  const std::string subject = gpu ? fmt::format("GPU {}", *gpu) : "node";
  const std::string what =
      system ? fmt::format("{} {}", subject, HealthSystemName(*system)) : subject;
  const std::string reason = fmt::format("cleared by {}", principal.description);
  const absl::Time now = options_.clock->Now();
  std::vector<Incident> cleared =
      gpu ? health_->Clear(*gpu, system, reason, now) : health_->ClearNode(system, reason, now);
  for (const std::unique_ptr<HealthSource>& source : sources_) {  // fixed since the first tick
    for (HealthSystem judged : source->systems()) {
      if (IsNodeLevel(judged) == gpu.has_value() || (system && *system != judged)) continue;
      source->Cleared(gpu, now);  // its count rules start again
      break;
    }
  }
  std::string list;
  for (const Incident& incident : cleared) {
    list += fmt::format("{}{} {} ({})", list.empty() ? "" : ", ", HealthStatusName(incident.status),
                        incident.code, incident.message);
  }
  Record({.kind = EventKind::kHealthCleared,
          .gpu = gpu ? static_cast<int>(*gpu) : -1,
          .principal = principal,
          .message = fmt::format("{}: {} incident(s) cleared{}{}", what, cleared.size(),
                                 list.empty() ? "" : ": ", list)});
  return cleared;
}

absl::StatusOr<GpuResetResult> Engine::ResetGpu(uint32_t gpu, std::string_view uuid,
                                                std::string_view reason,
                                                const Principal& principal) {
  if (gpu >= gpus().size()) {
    return absl::InvalidArgumentError(
        fmt::format("GPU {} does not exist: this engine has {} GPU{} (0-{})", gpu, gpus().size(),
                    gpus().size() == 1 ? "" : "s", gpus().size() - 1));
  }
  const std::string& gpu_uuid = gpus()[gpu].uuid;
  if (!uuid.empty() && uuid != gpu_uuid) {
    return absl::NotFoundError(fmt::format(
        "GPU {} is {}, not {}: not reset (list the GPUs with `vigil gpus`)", gpu, gpu_uuid, uuid));
  }
  if (resetting_.exchange(true)) {
    return absl::AbortedError("another GPU reset is running on this engine: try again after it");
  }
  struct Done {
    std::atomic<bool>* flag;
    ~Done() { flag->store(false); }
  } done{&resetting_};
  const std::string subject = fmt::format("GPU {} ({})", gpu, gpu_uuid);
  // From the safety check to the end of the reset the tick reads nothing, the values held stay
  // (as DCGM pauses its cache manager): the nvml backend releases NVML for the reset, and the
  // check reads the MIG instances the tick's reads maintain.
  sampling_mutex_.LockWhen(absl::Condition(
      +[](bool* in_flight) { return !*in_flight; }, &reads_in_flight_));
  sampling_paused_ = true;
  sampling_mutex_.Unlock();
  struct Resume {
    Engine* engine;
    ~Resume() {
      absl::MutexLock lock(&engine->sampling_mutex_);
      engine->sampling_paused_ = false;
    }
  } resume{this};
  absl::StatusOr<std::vector<uint32_t>> processes = Pids(backend_->ReadProcesses(gpu));
  if (!processes.ok() && processes.status().code() == absl::StatusCode::kFailedPrecondition) {
    // A GPU that needs a reset answers nothing, its processes included: the reset is what it
    // needs, and the driver itself refuses one while any process still holds the GPU.
    spdlog::warn(
        "{}: its compute processes cannot be listed ({}); the driver refuses the reset "
        "if any remain",
        subject, MessageOf(processes.status()));
    processes = std::vector<uint32_t>();
  }
  if (!processes.ok()) {
    return absl::InternalError(
        fmt::format("{}: cannot tell whether a compute process uses it, so it is not reset: {}",
                    subject, MessageOf(processes.status())));
  }
  if (!processes->empty()) {
    return absl::FailedPreconditionError(fmt::format(
        "{} is in use by {} compute process{} (pid {}): not reset; drain its workloads first",
        subject, processes->size(), processes->size() == 1 ? "" : "es",
        absl::StrJoin(*processes, ", ")));
  }
  const auto audit = [&](std::string message) {
    Record({.kind = EventKind::kGpuReset,
            .gpu = static_cast<int>(gpu),
            .principal = principal,
            .message = std::move(message)});
  };
  const std::string why = reason.empty() ? "" : fmt::format(" ({})", reason);
  audit(fmt::format("{}: reset requested by {}{}", subject, principal.description, why));
  spdlog::info("{}: resetting, as {} asked{}", subject, principal.description, why);
  const absl::Time start = options_.clock->Now();
  auto output = backend_->ResetGpu(gpu);
  const absl::Duration took = options_.clock->Now() - start;
  if (!output.ok()) {
    audit(fmt::format("{}: reset failed: {}", subject, MessageOf(output.status())));
    spdlog::error("{}: the reset failed: {}", subject, MessageOf(output.status()));
    // Attempted and failed: not a refusal to ask again about (those are FailedPrecondition).
    return absl::InternalError(
        fmt::format("{}: the reset failed: {}", subject, MessageOf(output.status())));
  }
  GpuResetResult result{.gpu = gpu, .uuid = gpu_uuid, .output = *output, .took = took};
  result.injections_cleared = RecordCleared(injections_.ClearGpu(gpu), principal, "GPU reset");
  audit(fmt::format("{}: reset done in {}: {}", subject, absl::FormatDuration(took),
                    FirstLine(*output)));
  spdlog::info("{}: reset done in {}", subject, absl::FormatDuration(took));
  return result;
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
  // Under the lock only the series' snapshots are taken (block pointers and a copy of each open
  // block); counting and decoding happen after it, so a long read never holds up a tick.
  std::vector<HistorySeries> result;
  std::vector<HistoryStore::Snapshot> snapshots;
  {
    absl::ReaderMutexLock lock(&history_mutex_);
    for (uint32_t gpu : *gpu_list) {
      for (size_t index : *field_indexes) {
        HistorySeries& series = result.emplace_back();
        series.gpu = gpu;
        series.field = layout_->field(index).id;
        snapshots.push_back(history_.Read(gpu, index, request.start, request.end));
      }
    }
    if (request.include_mig_instances) {
      const std::shared_ptr<const MigTable> mig = Mig();
      for (uint32_t gpu : *gpu_list) {
        for (const MigInstance& instance : mig->gpus[gpu].instances) {
          auto slot = instance_slots_.find(InstanceKey(gpu, instance));
          if (slot == instance_slots_.end()) continue;  // appeared since the last tick
          for (size_t index : *field_indexes) {
            const auto k = instance_slot_[index];
            if (!k) continue;
            HistorySeries& series = result.emplace_back();
            series.gpu = gpu;
            series.gpu_instance = instance.gpu_instance_id;
            series.field = layout_->field(index).id;
            snapshots.push_back(
                instance_history_->Read(slot->second, *k, request.start, request.end));
          }
        }
      }
    }
  }
  size_t total = 0;
  for (const HistoryStore::Snapshot& snapshot : snapshots) {
    total += std::min(max_samples, snapshot.Count());
  }
  if (total > kMaxHistoryResponseSamples) {
    return absl::InvalidArgumentError(fmt::format(
        "the request would return {} samples, over the limit of {}: narrow the time range, "
        "the GPUs or the fields, or set max_samples",
        total, kMaxHistoryResponseSamples));
  }
  for (size_t i = 0; i < snapshots.size(); ++i) {
    snapshots[i].Decode(max_samples, &result[i].samples, &result[i].truncated);
  }
  return result;
}

}  // namespace vigil
