// Implements the health evaluator: DCGM's health rules over the tick's snapshot, the XID policy,
// incidents, states and transitions.
#include "health/evaluator.h"

#include <algorithm>

#include "common/check.h"
#include "fields/catalogue.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

// The fields each system's rules read: when one of them is missing or stale the system is
// UNKNOWN (fields the GPU does not support at all are simply not judged).
std::vector<FieldId> InputsOf(HealthSystem system) {
  switch (system) {
    case HealthSystem::kPcie:
      return {fid::kPcieReplayCounter, fid::kPcieLinkGen, fid::kPcieLinkWidth};
    case HealthSystem::kMemory:
      return {fid::kEccDbeVolTotal,    fid::kRetiredPending,  fid::kRetiredSbe,
              fid::kRetiredDbe,        fid::kRowRemapFailure, fid::kUncorrectableRemappedRows,
              fid::kMemoryUnrepairable};
    case HealthSystem::kInforom:
      return {fid::kInforomConfigValid};
    case HealthSystem::kThermal:
      return {fid::kThermalViolation};
    case HealthSystem::kPower:
      return {fid::kPowerViolation};
    case HealthSystem::kNvlink:
      return {fid::kNvlinkCrcFlitErrors, fid::kNvlinkCrcDataErrors, fid::kNvlinkReplayErrors,
              fid::kNvlinkRecoveryErrors};
    case HealthSystem::kDriver:
      return {fid::kGpuRecoveryAction};
  }
  return {};
}

// DCGM's PCIe replay allowance per lane per minute, by link generation.
double ReplaysPerLanePerMinute(int64_t generation) {
  static constexpr double kRates[] = {0.15, 0.3, 0.48, 0.96, 1.92, 3.84};
  const int64_t index = std::clamp<int64_t>(generation, 1, 6) - 1;
  return kRates[index];
}

std::string Ago(absl::Duration age) {
  return absl::FormatDuration(absl::Trunc(age, absl::Seconds(1)));
}

}  // namespace

HealthEvaluator::HealthEvaluator(HealthPolicy policy, std::shared_ptr<const FieldLayout> layout,
                                 std::vector<GpuIdentity> gpus,
                                 std::vector<absl::Duration> intervals, IncidentSink* sink,
                                 std::vector<Incident> restored)
    : policy_(std::move(policy)),
      layout_(std::move(layout)),
      gpus_(std::move(gpus)),
      intervals_(std::move(intervals)),
      sink_(sink) {
  for (absl::Duration interval : intervals_)
    stale_after_.push_back(interval * policy_.stale_intervals);
  for (size_t i = 0; i < layout_->size(); ++i) {
    const FieldId id = layout_->field(i).id;
    if (id >= index_of_.size()) index_of_.resize(id + 1, -1);
    index_of_[id] = static_cast<int32_t>(i);
  }
  absl::MutexLock lock(&mutex_);
  incidents_.resize(gpus_.size());
  active_.resize(gpus_.size());
  counters_.resize(gpus_.size());
  xid_times_.resize(gpus_.size());
  unknown_.assign(gpus_.size(),
                  std::vector<std::string>(std::size(kAllHealthSystems), "not evaluated yet"));
  for (Incident& incident : restored) {
    VIGIL_CHECK(incident.gpu < gpus_.size());
    incidents_[incident.gpu][incident.key] = std::move(incident);
  }
  latest_ = BuildVerdict(0, absl::UnixEpoch());
}

size_t HealthEvaluator::Index(FieldId field) const {
  VIGIL_CHECK(field < index_of_.size() && index_of_[field] >= 0);
  return static_cast<size_t>(index_of_[field]);
}

void HealthEvaluator::RecordXid(uint32_t gpu, uint32_t xid, absl::Time time, bool injected) {
  if (gpu >= gpus_.size()) return;
  absl::MutexLock lock(&mutex_);
  pending_xids_.push_back({gpu, xid, time, injected});
}

std::optional<int64_t> HealthEvaluator::WindowDelta(uint32_t gpu, FieldId field,
                                                    const Snapshot& snapshot, absl::Time now,
                                                    bool* reset, bool* injected) {
  const LatestValue& latest = snapshot.at(gpu, Index(field));
  if (!latest.value.ok()) return std::nullopt;
  CounterWindow& window = counters_[gpu][field];
  if (latest.sample_seq != window.last_seq) {
    window.last_seq = latest.sample_seq;
    const int64_t value = latest.value.as_int();
    if (!window.samples.empty() && value < window.samples.back().second) {
      *reset = true;  // only a GPU reset or driver reload takes a cumulative counter back
      window.samples.clear();
    }
    window.samples.emplace_back(latest.sample_time, value);
  }
  // Keep the newest sample at or before the window's start as the baseline.
  const absl::Time start = now - policy_.window;
  while (window.samples.size() > 1 && window.samples[1].first <= start) {
    window.samples.pop_front();
  }
  *injected |= latest.value.injected;
  return window.samples.back().second - window.samples.front().second;
}

void HealthEvaluator::EvaluateRules(uint32_t gpu, const Snapshot& snapshot, absl::Time now,
                                    std::vector<Condition>* conditions, bool* reset_seen) {
  const auto value = [&](FieldId field) -> const FieldValue& {
    return snapshot.at(gpu, Index(field)).value;
  };
  const auto add = [&](HealthSystem system, HealthStatus status, std::string key, std::string code,
                       std::string message, std::string action, bool injected) {
    conditions->push_back({system, status, std::move(key), std::move(code), std::move(message),
                           std::move(action), injected});
  };
  const double window_s = absl::ToDoubleSeconds(policy_.window);
  const std::string reset_action =
      "drain the node's workloads and reset the GPU (nvidia-smi -r), or reboot the node";

  // Resets: volatile ECC counters and the energy counter only go back on a GPU reset or a
  // driver reload, which is what clears sticky failures.
  for (FieldId field : {fid::kEccSbeVolTotal, fid::kEccDbeVolTotal, fid::kTotalEnergy}) {
    bool ignored = false;
    WindowDelta(gpu, field, snapshot, now, reset_seen, &ignored);
  }

  // PCIe: replays in the window above the allowance for the link's generation and width.
  {
    bool injected = false, reset = false;
    const auto replays =
        WindowDelta(gpu, fid::kPcieReplayCounter, snapshot, now, &reset, &injected);
    const FieldValue& gen = value(fid::kPcieLinkGen);
    const FieldValue& width = value(fid::kPcieLinkWidth);
    if (replays && gen.ok() && width.ok() && width.as_int() > 0) {
      const double limit = ReplaysPerLanePerMinute(gen.as_int()) * width.as_int() * window_s / 60.0;
      if (*replays > limit) {
        add(HealthSystem::kPcie, HealthStatus::kWarn, "pcie.replay_rate", "DCGM_FR_PCI_REPLAY_RATE",
            fmt::format("{} PCIe replays in the last {}, above the {:.1f} allowed for a Gen{} x{} "
                        "link",
                        *replays, absl::FormatDuration(policy_.window), limit, gen.as_int(),
                        width.as_int()),
            "check the PCIe link (lspci -vv, riser, slot); reseat or replace the GPU if it "
            "persists",
            injected || gen.injected || width.injected);
      }
    }
  }

  // Memory.
  if (const FieldValue& dbe = value(fid::kEccDbeVolTotal); dbe.ok() && dbe.as_int() > 0) {
    add(HealthSystem::kMemory, HealthStatus::kFail, "memory.volatile_dbe",
        "DCGM_FR_VOLATILE_DBE_DETECTED",
        fmt::format("{} uncorrectable (double-bit) ECC error{} since the driver loaded",
                    dbe.as_int(), dbe.as_int() == 1 ? "" : "s"),
        reset_action, dbe.injected);
  }
  if (const FieldValue& pending = value(fid::kRetiredPending);
      pending.ok() && pending.as_int() > 0) {
    add(HealthSystem::kMemory, HealthStatus::kWarn, "memory.pending_retirement",
        "DCGM_FR_PENDING_PAGE_RETIREMENTS", "memory pages are pending retirement",
        "reset the GPU at the next maintenance window so the retirement takes effect",
        pending.injected);
  }
  const FieldValue& retired_sbe = value(fid::kRetiredSbe);
  const FieldValue& retired_dbe = value(fid::kRetiredDbe);
  if (retired_sbe.ok() && retired_dbe.ok() &&
      retired_sbe.as_int() + retired_dbe.as_int() >= policy_.retired_pages_fail) {
    add(HealthSystem::kMemory, HealthStatus::kFail, "memory.retired_pages",
        "DCGM_FR_RETIRED_PAGES_LIMIT",
        fmt::format("{} retired pages ({} single-bit, {} double-bit), at or above the limit of {}",
                    retired_sbe.as_int() + retired_dbe.as_int(), retired_sbe.as_int(),
                    retired_dbe.as_int(), policy_.retired_pages_fail),
        "replace the GPU (RMA)", retired_sbe.injected || retired_dbe.injected);
  }
  if (retired_dbe.ok() && retired_dbe.as_int() > policy_.retired_dbe_pages_fail) {
    add(HealthSystem::kMemory, HealthStatus::kFail, "memory.retired_dbe_pages",
        "DCGM_FR_RETIRED_PAGES_DBE_LIMIT",
        fmt::format("{} pages retired for double-bit errors, above the limit of {}",
                    retired_dbe.as_int(), policy_.retired_dbe_pages_fail),
        "replace the GPU (RMA)", retired_dbe.injected);
  }
  if (const FieldValue& failed = value(fid::kRowRemapFailure); failed.ok() && failed.as_int() > 0) {
    add(HealthSystem::kMemory, HealthStatus::kFail, "memory.row_remap_failure",
        "DCGM_FR_ROW_REMAP_FAILURE", "row remapping failed: the GPU ran out of spare rows",
        "replace the GPU (RMA)", failed.injected);
  }
  if (const FieldValue& rows = value(fid::kUncorrectableRemappedRows);
      rows.ok() && rows.as_int() >= policy_.uncorrectable_rows_warn) {
    add(HealthSystem::kMemory, HealthStatus::kWarn, "memory.uncorrectable_rows",
        "DCGM_FR_UNCORRECTABLE_ROW_REMAP",
        fmt::format("{} rows remapped for uncorrectable errors (warning at {})", rows.as_int(),
                    policy_.uncorrectable_rows_warn),
        "plan to replace the GPU; it is running out of spare rows", rows.injected);
  }
  if (const FieldValue& unrepairable = value(fid::kMemoryUnrepairable);
      unrepairable.ok() && unrepairable.as_int() > 0) {
    add(HealthSystem::kMemory, HealthStatus::kFail, "memory.unrepairable", "DCGM_FR_FAULTY_MEMORY",
        "the GPU reports memory it cannot repair", "replace the GPU (RMA)", unrepairable.injected);
  }

  // InfoROM.
  if (const FieldValue& valid = value(fid::kInforomConfigValid);
      valid.ok() && valid.as_int() == 0) {
    add(HealthSystem::kInforom, HealthStatus::kWarn, "inforom.corrupt", "DCGM_FR_CORRUPT_INFOROM",
        "the infoROM checksums do not match (corrupt infoROM)",
        "update the infoROM/VBIOS with NVIDIA's tools, or replace the board", valid.injected);
  }

  // Thermal and power: time spent throttled within the window.
  const auto violation = [&](FieldId field, HealthSystem system, double fraction_limit,
                             const char* key, const char* code, const char* what,
                             const char* action) {
    bool injected = false, reset = false;
    const auto ns = WindowDelta(gpu, field, snapshot, now, &reset, &injected);
    if (!ns || *ns <= 0) return;
    const double fraction = static_cast<double>(*ns) / absl::ToDoubleNanoseconds(policy_.window);
    if (fraction < fraction_limit) return;
    add(system, HealthStatus::kWarn, key, code,
        fmt::format("throttled for {} for {:.1f} s of the last {} ({:.0f}%)", what, *ns / 1e9,
                    absl::FormatDuration(policy_.window), fraction * 100),
        action, injected);
  };
  violation(fid::kThermalViolation, HealthSystem::kThermal, policy_.thermal_violation_fraction,
            "thermal.violation", "DCGM_FR_CLOCKS_EVENT_THERMAL", "temperature",
            "check cooling: fans, airflow, inlet temperature, blocked heat sinks");
  violation(fid::kPowerViolation, HealthSystem::kPower, policy_.power_violation_fraction,
            "power.violation", "DCGM_FR_CLOCKS_EVENT_POWER", "power",
            "check the power limit (nvidia-smi -q -d POWER) and the node's power supply");

  // NVLink.
  {
    bool injected = false, reset = false;
    const auto flit = WindowDelta(gpu, fid::kNvlinkCrcFlitErrors, snapshot, now, &reset, &injected);
    const auto data = WindowDelta(gpu, fid::kNvlinkCrcDataErrors, snapshot, now, &reset, &injected);
    const int64_t crc = flit.value_or(0) + data.value_or(0);
    if ((flit || data) && crc > 0) {
      // The rate over the span the samples actually cover (at least a second).
      const auto& samples = counters_[gpu][fid::kNvlinkCrcFlitErrors].samples;
      const double span_s =
          samples.size() > 1
              ? std::max(1.0, absl::ToDoubleSeconds(samples.back().first - samples.front().first))
              : window_s;
      const double rate = crc / span_s;
      if (rate >= policy_.nvlink_crc_fail_rate) {
        add(HealthSystem::kNvlink, HealthStatus::kFail, "nvlink.crc_rate",
            "DCGM_FR_NVLINK_ERROR_CRITICAL",
            fmt::format("{} NVLink CRC errors in {:.0f} s ({:.0f}/s, failing at {:.0f}/s)", crc,
                        span_s, rate, policy_.nvlink_crc_fail_rate),
            "drain the node, reset the GPUs of the NVLink domain; replace the part if it "
            "recurs",
            injected);
      } else if (crc >= policy_.nvlink_crc_warn_count) {
        add(HealthSystem::kNvlink, HealthStatus::kWarn, "nvlink.crc",
            "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD",
            fmt::format("{} NVLink CRC errors in the last {}", crc,
                        absl::FormatDuration(policy_.window)),
            "watch the NVLink counters (nvidia-smi nvlink -e); reset the GPUs if they keep "
            "growing",
            injected);
      }
    }
    bool link_injected = false;
    const auto replays =
        WindowDelta(gpu, fid::kNvlinkReplayErrors, snapshot, now, &reset, &link_injected);
    const auto recoveries =
        WindowDelta(gpu, fid::kNvlinkRecoveryErrors, snapshot, now, &reset, &link_injected);
    if (replays.value_or(0) > 0 || recoveries.value_or(0) > 0) {
      add(HealthSystem::kNvlink, HealthStatus::kFail, "nvlink.replay_recovery",
          "DCGM_FR_NVLINK_ERROR_THRESHOLD",
          fmt::format("{} NVLink replay and {} recovery errors in the last {}", replays.value_or(0),
                      recoveries.value_or(0), absl::FormatDuration(policy_.window)),
          "drain the node, reset the GPUs of the NVLink domain; replace the part if it recurs",
          link_injected);
    }
  }

  // Driver: the GPU recovery action the driver asks for, and a GPU that stopped answering.
  if (const FieldValue& action = value(fid::kGpuRecoveryAction);
      action.ok() && action.as_int() > 0) {
    struct Recovery {
      HealthStatus status;
      const char* code;
      const char* what;
      const char* action;
    };
    static const Recovery kRecoveries[] = {
        {HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_RESET", "a GPU reset",
         "drain the node's workloads and reset the GPU (nvidia-smi -r)"},
        {HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_REBOOT", "a node reboot",
         "drain the node and reboot it"},
        {HealthStatus::kWarn, "DCGM_FR_GPU_RECOVERY_DRAIN_P2P", "draining peer-to-peer traffic",
         "stop peer-to-peer (NVLink/PCIe P2P) workloads on this GPU"},
        {HealthStatus::kFail, "DCGM_FR_GPU_RECOVERY_DRAIN_RESET",
         "draining peer-to-peer traffic and a GPU reset",
         "drain the node's workloads and reset the GPU (nvidia-smi -r)"},
    };
    if (action.as_int() <= 4) {
      const Recovery& recovery = kRecoveries[action.as_int() - 1];
      add(HealthSystem::kDriver, recovery.status, "driver.recovery_action", recovery.code,
          fmt::format("the driver asks for {} (recovery action {})", recovery.what,
                      action.as_int()),
          recovery.action, action.injected);
    }
  }
  const ValueStatus read = snapshot.gpu_read_status(gpu);
  if (read == ValueStatus::kGpuLost) {
    add(HealthSystem::kDriver, HealthStatus::kFail, "driver.gpu_lost", "DCGM_FR_FALLEN_OFF_BUS",
        "the GPU stopped answering the driver (lost / fallen off the bus)",
        "drain the node and restart it; check the GPU's seating, power and PCIe link if it "
        "recurs",
        false);
  } else if (read == ValueStatus::kTimeout) {
    // A driver call that hangs often comes before a GPU falls off the bus or a GSP timeout
    // (XID 119), but a slow call alone is no proof of a fault: WARN while it lasts, and the
    // systems read UNKNOWN because their data is not fresh.
    add(HealthSystem::kDriver, HealthStatus::kWarn, "driver.gpu_unresponsive", "",
        "the driver did not answer a query for this GPU in time: its readings are stale",
        "check the kernel log (dmesg) for XIDs and NVRM messages; if calls keep hanging, drain "
        "the node and reset the GPU or reboot",
        false);
  }
}

void HealthEvaluator::EvaluateXids(absl::Time now) {
  std::vector<PendingXid> xids;
  xids.swap(pending_xids_);
  for (const PendingXid& xid : xids) {
    const XidRule& rule = policy_.RuleFor(xid.xid);
    if (rule.severity == XidRule::Severity::kIgnore) continue;
    std::deque<absl::Time>& times = xid_times_[xid.gpu][xid.xid];
    times.push_back(xid.time);
    while (!times.empty() && times.front() < now - rule.window) times.pop_front();
    if (rule.severity == XidRule::Severity::kCount && times.size() < rule.count) continue;
    const HealthStatus status =
        rule.severity == XidRule::Severity::kFail ? HealthStatus::kFail : HealthStatus::kWarn;
    const std::string repeats =
        rule.severity == XidRule::Severity::kCount
            ? fmt::format(" ({} in the last {}, warning at {})", times.size(),
                          absl::FormatDuration(rule.window), rule.count)
            : "";
    Upsert(xid.gpu,
           {rule.system, status, fmt::format("xid.{}", xid.xid), rule.code,
            fmt::format("XID {}: {}{}", xid.xid, rule.meaning, repeats), rule.action, xid.injected},
           now, /*onset=*/true, rule.window);
  }
}

void HealthEvaluator::Upsert(uint32_t gpu, const Condition& condition, absl::Time now, bool onset,
                             absl::Duration expire_after) {
  auto [it, created] = incidents_[gpu].try_emplace(condition.key);
  Incident& incident = it->second;
  const uint64_t old_count = incident.count;
  if (created) {
    incident = Incident{.gpu = gpu,
                        .uuid = gpus_[gpu].uuid,
                        .system = condition.system,
                        .status = condition.status,
                        .key = condition.key,
                        .first_seen = now,
                        .count = 1};
  } else if (onset) {
    ++incident.count;
  }
  incident.status = Worst(incident.status, condition.status);
  incident.code = condition.code;
  incident.message = condition.message;
  incident.action = condition.action;
  incident.last_seen = now;
  incident.injected = condition.injected;
  incident.expire_after = expire_after;
  if (incident.status == HealthStatus::kFail && sink_ != nullptr &&
      (created || incident.count != old_count)) {
    sink_->Raised(incident);
  }
}

std::string HealthEvaluator::UnknownReason(uint32_t gpu, HealthSystem system,
                                           const Snapshot& snapshot, absl::Time now) const {
  // A GPU that does not answer as a whole: its fields not due this tick still hold older
  // readings, but nothing about it can be judged.
  switch (snapshot.gpu_read_status(gpu)) {
    case ValueStatus::kOk:
      break;
    case ValueStatus::kGpuLost:
      return "the GPU is lost: it does not answer";
    case ValueStatus::kTimeout:
      return "the driver does not answer for this GPU in time (readings timed out)";
    default:
      return fmt::format("the GPU cannot be read ({})",
                         ValueStatusName(snapshot.gpu_read_status(gpu)));
  }
  for (FieldId field : InputsOf(system)) {
    const size_t index = Index(field);
    const LatestValue& latest = snapshot.at(gpu, index);
    const std::string_view name = layout_->field(index).name;
    switch (latest.value.status) {
      case ValueStatus::kOk: {
        const absl::Duration age = now - latest.sample_time;
        if (age > stale_after_[index]) {
          return fmt::format("{} is stale: last read {} ago", name, Ago(age));
        }
        break;
      }
      case ValueStatus::kNotSupported:
        break;  // this GPU has no such thing to judge
      case ValueStatus::kNoData:
        return fmt::format("no data yet for {}", name);
      case ValueStatus::kGpuLost:
        return "the GPU is lost: it does not answer";
      case ValueStatus::kTimeout:
        return fmt::format("reading {} timed out", name);
      default:
        return fmt::format("{} could not be read ({})", name, ValueStatusName(latest.value.status));
    }
  }
  return "";
}

std::shared_ptr<const HealthVerdict> HealthEvaluator::Evaluate(
    const Snapshot& snapshot, absl::Time now, std::vector<HealthTransition>* transitions) {
  absl::MutexLock lock(&mutex_);
  for (uint32_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    std::vector<Condition> conditions;
    bool reset_seen = false;
    EvaluateRules(gpu, snapshot, now, &conditions, &reset_seen);
    if (reset_seen) {
      // Sticky failures end with a GPU reset; what still holds is raised again just below.
      for (auto it = incidents_[gpu].begin(); it != incidents_[gpu].end();) {
        if (sink_ != nullptr && it->second.status == HealthStatus::kFail) {
          sink_->Cleared(it->second, "GPU reset seen");
        }
        it = incidents_[gpu].erase(it);
      }
      active_[gpu].clear();
      spdlog::info(
          "GPU {} ({}): reset seen (volatile counters went back); its incidents are "
          "cleared",
          gpu, gpus_[gpu].uuid);
    }
    std::map<std::string, bool> active;
    for (const Condition& condition : conditions) {
      Upsert(gpu, condition, now, /*onset=*/!active_[gpu].contains(condition.key), policy_.window);
      active[condition.key] = true;
    }
    active_[gpu] = std::move(active);
    for (size_t s = 0; s < std::size(kAllHealthSystems); ++s) {
      unknown_[gpu][s] = UnknownReason(gpu, kAllHealthSystems[s], snapshot, now);
    }
  }
  EvaluateXids(now);
  // WARN incidents that stopped holding expire; FAIL incidents stay until cleared.
  for (uint32_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    for (auto it = incidents_[gpu].begin(); it != incidents_[gpu].end();) {
      const Incident& incident = it->second;
      const bool expired = incident.status != HealthStatus::kFail &&
                           !active_[gpu].contains(incident.key) &&
                           now - incident.last_seen >= incident.expire_after;
      it = expired ? incidents_[gpu].erase(it) : std::next(it);
    }
  }
  std::shared_ptr<const HealthVerdict> verdict = BuildVerdict(snapshot.seq, snapshot.time);
  // The first evaluation is the baseline, not a change: it would otherwise report every
  // (GPU, system) going from "not evaluated" to its status at every engine start.
  const bool baseline = latest_->seq == 0;
  if (baseline) {
    spdlog::info("health baseline at seq {}: overall {}", verdict->seq,
                 HealthStatusName(verdict->overall));
  }
  for (size_t g = 0; !baseline && g < verdict->gpus.size(); ++g) {
    for (size_t s = 0; s < verdict->gpus[g].systems.size(); ++s) {
      const SystemHealth& now_system = verdict->gpus[g].systems[s];
      const SystemHealth& before = latest_->gpus[g].systems[s];
      if (now_system.status == before.status) continue;
      std::string summary = now_system.unknown_reason;
      bool injected = false;
      for (const Incident& incident : now_system.incidents) {
        summary +=
            fmt::format("{}{}: {}", summary.empty() ? "" : "; ", incident.code, incident.message);
        injected |= incident.injected;
      }
      transitions->push_back({static_cast<uint32_t>(g), gpus_[g].uuid, now_system.system,
                              before.status, now_system.status, std::move(summary), injected});
    }
  }
  latest_ = verdict;
  return verdict;
}

std::shared_ptr<const HealthVerdict> HealthEvaluator::BuildVerdict(uint64_t seq,
                                                                   absl::Time time) const {
  auto verdict = std::make_shared<HealthVerdict>();
  verdict->seq = seq;
  verdict->time = time;
  verdict->overall = HealthStatus::kPass;
  for (uint32_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    GpuHealth& health = verdict->gpus.emplace_back();
    health.gpu = gpu;
    health.uuid = gpus_[gpu].uuid;
    for (size_t s = 0; s < std::size(kAllHealthSystems); ++s) {
      SystemHealth& system = health.systems.emplace_back();
      system.system = kAllHealthSystems[s];
      for (const auto& [key, incident] : incidents_[gpu]) {
        if (incident.system != system.system) continue;
        system.incidents.push_back(incident);
        system.status = Worst(system.status, incident.status);
      }
      system.unknown_reason = unknown_[gpu][s];
      if (!system.unknown_reason.empty())
        system.status = Worst(system.status, HealthStatus::kUnknown);
      health.status = Worst(health.status, system.status);
    }
    verdict->overall = Worst(verdict->overall, health.status);
  }
  return verdict;
}

std::vector<Incident> HealthEvaluator::Clear(uint32_t gpu, std::optional<HealthSystem> system,
                                             const std::string& reason) {
  std::vector<Incident> cleared;
  if (gpu >= gpus_.size()) return cleared;
  absl::MutexLock lock(&mutex_);
  for (auto it = incidents_[gpu].begin(); it != incidents_[gpu].end();) {
    if (system && it->second.system != *system) {
      ++it;
      continue;
    }
    if (sink_ != nullptr && it->second.status == HealthStatus::kFail) {
      sink_->Cleared(it->second, reason);
    }
    active_[gpu].erase(it->first);
    cleared.push_back(std::move(it->second));
    it = incidents_[gpu].erase(it);
  }
  return cleared;
}

std::shared_ptr<const HealthVerdict> HealthEvaluator::Latest() const {
  absl::MutexLock lock(&mutex_);
  return latest_;
}

}  // namespace vigil
