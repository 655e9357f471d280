// Implements SimBackend over one SimGpu model per GPU.
#include "backend/sim_backend.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/check.h"
#include "common/duration.h"
#include "common/status.h"
#include "common/strings.h"
#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil {

absl::StatusOr<std::unique_ptr<SimBackend>> SimBackend::Create(const SimOptions& options) {
  if (options.gpu_count == 0 || options.gpu_count > kMaxGpus) {
    return absl::InvalidArgumentError(
        fmt::format("--gpus {} is out of range: the simulated backend supports 1 to {} GPUs",
                    options.gpu_count, kMaxGpus));
  }
  std::unique_ptr<SimBackend> sim(new SimBackend(options));
  std::vector<bool> laid_out(options.gpu_count, false);
  for (const MigLayout& layout : options.mig) {
    if (layout.gpu >= options.gpu_count) {
      return absl::InvalidArgumentError(
          fmt::format("--mig {}:...: there is no GPU {} (--gpus {}: 0-{})", layout.gpu, layout.gpu,
                      options.gpu_count, options.gpu_count - 1));
    }
    if (laid_out[layout.gpu]) {
      return absl::InvalidArgumentError(
          fmt::format("--mig {}:... is given twice: give all of GPU {}'s instances in one --mig",
                      layout.gpu, layout.gpu));
    }
    laid_out[layout.gpu] = true;
    GpuIdentity& gpu = sim->identities_[layout.gpu];
    auto instances = PlaceMigInstances(layout.profiles, gpu.memory_total_mib, gpu.uuid);
    if (!instances.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("--mig for GPU {}: {}", layout.gpu, MessageOf(instances.status())));
    }
    gpu.mig = {.mode = true, .instances = *std::move(instances)};
  }
  std::set<std::pair<uint32_t, uint32_t>> pids;  // (GPU, pid)
  for (const SimWorkload& workload : options.workloads) {
    const std::string what = fmt::format("--sim-process {}:{}", workload.gpu, workload.process.pid);
    if (workload.gpu >= options.gpu_count) {
      return absl::InvalidArgumentError(fmt::format("{}: there is no GPU {} (--gpus {}: 0-{})",
                                                    what, workload.gpu, options.gpu_count,
                                                    options.gpu_count - 1));
    }
    const GpuIdentity& gpu = sim->identities_[workload.gpu];
    const int32_t gi = workload.process.gpu_instance;
    uint64_t memory_mib = gpu.memory_total_mib;
    if (gi >= 0) {
      const auto instance = std::find_if(
          gpu.mig.instances.begin(), gpu.mig.instances.end(),
          [&](const MigInstance& i) { return static_cast<int32_t>(i.gpu_instance_id) == gi; });
      if (instance == gpu.mig.instances.end()) {
        return absl::InvalidArgumentError(
            fmt::format("{}: GPU {} has no GPU instance {} (give its instances with --mig)", what,
                        workload.gpu, gi));
      }
      memory_mib = instance->memory_total_mib;
    }
    if (const uint64_t mib = workload.process.used_memory_bytes.value_or(0) >> 20;
        mib > memory_mib) {
      return absl::InvalidArgumentError(
          fmt::format("{}: {} MiB is more than the {} MiB the {} has; give at most that", what, mib,
                      memory_mib, gi >= 0 ? "GPU instance" : "GPU"));
    }
    if (!pids.emplace(workload.gpu, workload.process.pid).second) {
      return absl::InvalidArgumentError(
          fmt::format("{}: pid {} is given twice on GPU {}; a process is listed once per GPU", what,
                      workload.process.pid, workload.gpu));
    }
  }
  {
    absl::MutexLock lock(&sim->mutex_);  // no other thread has it yet: for the analysis
    for (const GpuIdentity& gpu : sim->identities_) sim->mig_.push_back(gpu.mig);
  }
  return sim;
}

SimBackend::SimBackend(const SimOptions& options)
    : mig_change_events_(options.mig_change_events), workloads_(options.workloads) {
  for (uint32_t i = 0; i < options.gpu_count; ++i) {
    models_.emplace_back(i, options.seed, options.driver_version);
    identities_.push_back(models_.back().identity());
  }
  lost_.assign(options.gpu_count, false);
  processes_.resize(options.gpu_count);
  process_list_errors_.resize(options.gpu_count);
  last_read_.assign(options.gpu_count, absl::InfinitePast());
}

absl::Status SimBackend::Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                              absl::Span<FieldValue> out) {
  VIGIL_CHECK(gpu < identities_.size());
  VIGIL_CHECK(out.size() == fields.size());
  absl::MutexLock lock(&mutex_);
  // The model keeps running while the GPU is "lost", so that it comes back with plausible values.
  models_[gpu].AdvanceTo(now);
  first_read_ = std::min(first_read_, now);
  last_read_[gpu] = now;
  if (lost_[gpu]) {
    return absl::UnavailableError(fmt::format(
        "GPU {} ({}) is lost: it stopped answering (simulated)", gpu, identities_[gpu].uuid));
  }
  for (size_t i = 0; i < fields.size(); ++i) out[i] = models_[gpu].Read(fields[i]);
  // The GPU's framebuffer holds its instances' processes too.
  if (const auto running = RunningWorkloads(gpu); !running.empty()) {
    AtLeastTheWorkloads(running, models_[gpu].Read(fid::kFbUsed), fields, out);
  }
  return absl::OkStatus();
}

std::vector<const SimWorkload*> SimBackend::RunningWorkloads(
    uint32_t gpu, std::optional<int32_t> instance) const {
  std::vector<const SimWorkload*> running;
  const absl::Duration since_start = last_read_[gpu] - first_read_;
  for (const SimWorkload& workload : workloads_) {
    if (workload.gpu == gpu && since_start >= workload.start && since_start < workload.end &&
        (!instance.has_value() || workload.process.gpu_instance == *instance)) {
      running.push_back(&workload);
    }
  }
  return running;
}

void SimBackend::AtLeastTheWorkloads(const std::vector<const SimWorkload*>& running,
                                     const FieldValue& model_fb_used,
                                     absl::Span<const FieldId> fields, absl::Span<FieldValue> out) {
  uint64_t workload_bytes = 0;
  uint32_t workload_sm = 0;  // an instance's processes have no share
  for (const SimWorkload* workload : running) {
    workload_bytes += workload->process.used_memory_bytes.value_or(0);
    workload_sm += workload->process.sm_util.value_or(0);
  }
  const auto workload_mib = static_cast<int64_t>(workload_bytes >> 20);
  // What the workloads add to the model's used memory, taken from the free memory.
  const int64_t added_mib =
      model_fb_used.ok() ? std::max<int64_t>(0, workload_mib - model_fb_used.as_int()) : 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (!out[i].ok()) continue;
    if (fields[i] == fid::kFbUsed) {
      out[i] = FieldValue::Int(out[i].as_int() + added_mib);
    } else if (fields[i] == fid::kFbFree) {
      out[i] = FieldValue::Int(std::max<int64_t>(0, out[i].as_int() - added_mib));
    } else if (fields[i] == fid::kGpuUtil) {
      out[i] = FieldValue::Int(std::max<int64_t>(out[i].as_int(), std::min(workload_sm, 100u)));
    }
  }
}

void SimBackend::StartEvents(EventSink* sink) {
  absl::MutexLock lock(&mutex_);
  sink_ = sink;
}

void SimBackend::StopEvents() {
  absl::MutexLock lock(&mutex_);
  sink_ = nullptr;
  // Returning means no delivery is in progress: the sink may be destroyed next.
  mutex_.Await(absl::Condition(this, &SimBackend::NoDeliveryInProgress));
}

void SimBackend::SetGpuLost(uint32_t gpu, bool lost) {
  VIGIL_CHECK(gpu < identities_.size());
  absl::MutexLock lock(&mutex_);
  lost_[gpu] = lost;
}

void SimBackend::RaiseXid(uint32_t gpu, uint32_t xid, absl::Time time) {
  VIGIL_CHECK(gpu < identities_.size());
  EventSink* sink = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    if (sink_ == nullptr) return;
    sink = sink_;
    ++deliveries_in_progress_;  // StopEvents waits for it
  }
  // Delivered without the lock: the sink (the engine) takes locks of its own and may read this
  // backend.
  sink->OnXid(XidEvent{.gpu = gpu, .xid = xid, .time = time});
  absl::MutexLock lock(&mutex_);
  --deliveries_in_progress_;
}

void SimBackend::SetProcesses(uint32_t gpu, std::vector<GpuProcess> processes) {
  VIGIL_CHECK(gpu < identities_.size());
  absl::MutexLock lock(&mutex_);
  processes_[gpu] = std::move(processes);
}

void SimBackend::FailProcessLists(uint32_t gpu, absl::Status error) {
  VIGIL_CHECK(gpu < identities_.size());
  absl::MutexLock lock(&mutex_);
  process_list_errors_[gpu] = std::move(error);
}

int SimBackend::resets() const {
  absl::MutexLock lock(&mutex_);
  return resets_;
}

absl::StatusOr<MigState> SimBackend::ReadMig(uint32_t gpu) {
  VIGIL_CHECK(gpu < identities_.size());
  absl::MutexLock lock(&mutex_);
  return mig_[gpu];
}

absl::Status SimBackend::ReadInstance(uint32_t gpu, const MigInstance& instance,
                                      absl::Span<const FieldId> fields, absl::Time now,
                                      absl::Span<FieldValue> out) {
  VIGIL_CHECK(gpu < identities_.size());
  VIGIL_CHECK(out.size() == fields.size());
  absl::MutexLock lock(&mutex_);
  const std::vector<MigInstance>& current = mig_[gpu].instances;
  if (std::find(current.begin(), current.end(), instance) == current.end()) {
    return absl::NotFoundError(fmt::format("GPU {} has no GPU instance {} ({}) any more", gpu,
                                           instance.gpu_instance_id, instance.uuid));
  }
  models_[gpu].AdvanceTo(now);
  for (size_t i = 0; i < fields.size(); ++i)
    out[i] = models_[gpu].ReadInstance(instance, fields[i]);
  if (const auto running = RunningWorkloads(gpu, static_cast<int32_t>(instance.gpu_instance_id));
      !running.empty()) {
    AtLeastTheWorkloads(running, models_[gpu].ReadInstance(instance, fid::kFbUsed), fields, out);
  }
  return absl::OkStatus();
}

absl::Status SimBackend::SetMig(uint32_t gpu, bool mode, const std::vector<std::string>& profiles) {
  VIGIL_CHECK(gpu < identities_.size());
  if (!mode && !profiles.empty()) {
    return absl::InvalidArgumentError("a GPU with MIG off has no GPU instances");
  }
  absl::MutexLock lock(&mutex_);
  std::vector<MigInstance> instances;
  if (!profiles.empty()) {
    auto placed = PlaceMigInstances(profiles, identities_[gpu].memory_total_mib,
                                    fmt::format("{}/{}", identities_[gpu].uuid, ++mig_changes_));
    if (!placed.ok()) return placed.status();
    instances = *std::move(placed);
  }
  mig_[gpu] = {.mode = mode, .instances = std::move(instances)};
  mig_change_noticed_ = mig_change_events_;
  return absl::OkStatus();
}

bool SimBackend::TakeMigChangeNotice() {
  absl::MutexLock lock(&mutex_);
  return std::exchange(mig_change_noticed_, false);
}

absl::StatusOr<std::vector<GpuProcess>> SimBackend::ReadProcesses(uint32_t gpu) {
  VIGIL_CHECK(gpu < identities_.size());
  absl::MutexLock lock(&mutex_);
  if (lost_[gpu]) {
    return absl::UnavailableError(fmt::format(
        "GPU {} ({}) is lost: it stopped answering (simulated)", gpu, identities_[gpu].uuid));
  }
  if (!process_list_errors_[gpu].ok()) return process_list_errors_[gpu];
  std::vector<GpuProcess> processes = processes_[gpu];
  for (const SimWorkload* workload : RunningWorkloads(gpu)) processes.push_back(workload->process);
  return processes;
}

absl::StatusOr<SimWorkload> ParseSimWorkload(std::string_view text) {
  const auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        fmt::format("--sim-process '{}': {}; give GPU[/GI]:PID:MEMORY_MIB[:SM_PERCENT]"
                    "[@START[-END]], e.g. 2:4001:3072:30@10s-70s",
                    Printable(text, 80), why));
  };
  SimWorkload workload;
  std::string_view spec = text;
  if (const size_t at = spec.find('@'); at != std::string_view::npos) {
    const std::string_view when = spec.substr(at + 1);
    spec = spec.substr(0, at);
    const size_t dash = when.find('-');
    auto start = ParseDuration(when.substr(0, dash));
    if (!start.ok() || *start < absl::ZeroDuration()) return invalid("the start is not a duration");
    workload.start = *start;
    if (dash != std::string_view::npos && dash + 1 < when.size()) {
      auto end = ParseDuration(when.substr(dash + 1));
      if (!end.ok()) return invalid("the end is not a duration");
      if (*end <= *start) return invalid("it ends before it starts");
      workload.end = *end;
    }
  }
  const std::vector<std::string_view> parts = Split(spec, ':');
  if (parts.size() < 3 || parts.size() > 4) return invalid("not GPU:PID:MEMORY_MIB[:SM_PERCENT]");
  std::string_view gpu = parts[0];
  if (const size_t slash = gpu.find('/'); slash != std::string_view::npos) {
    const std::optional<uint64_t> gi = ParseUint64(gpu.substr(slash + 1));
    if (!gi || *gi > 1023) return invalid("the GPU instance is not an id");
    workload.process.gpu_instance = static_cast<int32_t>(*gi);
    gpu = gpu.substr(0, slash);
  }
  const std::optional<uint64_t> index = ParseUint64(gpu);
  const std::optional<uint64_t> pid = ParseUint64(parts[1]);
  const std::optional<uint64_t> mib = ParseUint64(parts[2]);
  if (!index || *index > 1023) return invalid("the GPU is not an index");
  if (!pid || *pid == 0 || *pid > 4'194'304) return invalid("the pid is not one (1 to 4194304)");
  if (!mib || *mib > 1'048'576) return invalid("the memory is not a number of MiB");
  workload.gpu = static_cast<uint32_t>(*index);
  workload.process.pid = static_cast<uint32_t>(*pid);
  workload.process.used_memory_bytes = *mib << 20;
  if (parts.size() == 4) {
    const std::optional<uint64_t> sm = ParseUint64(parts[3]);
    if (!sm || *sm > 100) return invalid("the SM share is not a percentage");
    if (workload.process.gpu_instance >= 0) {
      return invalid("NVML samples no SM share on a GPU instance: leave it out there");
    }
    workload.process.sm_util = static_cast<uint32_t>(*sm);
  } else if (workload.process.gpu_instance < 0) {
    workload.process.sm_util = 0;  // a process with no sample, as NVML reads it
  }
  return workload;
}

absl::StatusOr<std::string> SimBackend::ResetGpu(uint32_t gpu) {
  VIGIL_CHECK(gpu < identities_.size());
  absl::MutexLock lock(&mutex_);
  lost_[gpu] = false;
  processes_[gpu].clear();
  models_[gpu].Reset();
  ++resets_;
  return fmt::format("GPU {} ({}) was reset (simulated)", gpu, identities_[gpu].uuid);
}

}  // namespace vigil
