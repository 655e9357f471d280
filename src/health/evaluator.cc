// Implements the health evaluator: DCGM's health rules over the tick's snapshot, the XID policy,
// incidents, states and transitions.
#include "health/evaluator.h"

#include <algorithm>

#include "common/check.h"
#include "fields/catalogue.h"
#include "fmt/format.h"
#include "health/rules.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

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

// What one GPU's rules see at one evaluation (RuleContext), with the check that each rule reads
// only the inputs it lists: those are what make its system UNKNOWN when missing or stale.
class HealthEvaluator::GpuRuleContext final : public RuleContext {
 public:
  GpuRuleContext(HealthEvaluator* evaluator, uint32_t gpu, const Snapshot& snapshot, absl::Time now,
                 std::vector<Condition>* conditions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(evaluator->mutex_)
      : evaluator_(evaluator), gpu_(gpu), snapshot_(snapshot), now_(now), conditions_(conditions) {}

  void Run(const HealthRule& rule) {
    rule_ = &rule;
    rule.evaluate(*this);
    rule_ = nullptr;
  }

  const HealthPolicy& policy() const override { return evaluator_->policy_; }
  const FieldValue& Value(FieldId field) override {
    CheckInput(field);
    return snapshot_.at(gpu_, evaluator_->Index(field)).value;
  }
  std::optional<int64_t> WindowDelta(FieldId field, bool* injected) override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {  // only constructed with the evaluator's mutex held
    CheckInput(field);
    bool reset = false;  // resets are the evaluator's own check (EvaluateRules)
    return evaluator_->WindowDelta(gpu_, field, snapshot_, now_, &reset, injected);
  }
  absl::Duration WindowSpan(FieldId field) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    CheckInput(field);
    const auto& samples = evaluator_->counters_[gpu_][field].samples;
    if (samples.size() < 2) return evaluator_->policy_.window;
    return std::max(absl::Seconds(1), samples.back().first - samples.front().first);
  }
  ValueStatus GpuRead() const override { return snapshot_.gpu_read_status(gpu_); }
  void Raise(HealthStatus status, std::string key, std::string code, std::string message,
             std::string action, bool injected) override {
    conditions_->push_back({rule_->system, status, std::move(key), std::move(code),
                            std::move(message), std::move(action), injected});
  }

 private:
  void CheckInput(FieldId field) const {
    VIGIL_CHECK(rule_ != nullptr && std::find(rule_->inputs.begin(), rule_->inputs.end(), field) !=
                                        rule_->inputs.end());
  }

  HealthEvaluator* const evaluator_;
  const uint32_t gpu_;
  const Snapshot& snapshot_;
  const absl::Time now_;
  std::vector<Condition>* const conditions_;
  const HealthRule* rule_ = nullptr;
};

void HealthEvaluator::EvaluateRules(uint32_t gpu, const Snapshot& snapshot, absl::Time now,
                                    std::vector<Condition>* conditions, bool* reset_seen) {
  // Resets: volatile ECC counters and the energy counter only go back on a GPU reset or a
  // driver reload, which is what clears sticky failures.
  for (FieldId field : {fid::kEccSbeVolTotal, fid::kEccDbeVolTotal, fid::kTotalEnergy}) {
    bool ignored = false;
    WindowDelta(gpu, field, snapshot, now, reset_seen, &ignored);
  }
  GpuRuleContext context(this, gpu, snapshot, now, conditions);
  for (const HealthRule& rule : HealthRules()) context.Run(rule);
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
