// Implements the health evaluator: DCGM's health rules over the tick's snapshot, the XID policy,
// incidents, states and transitions.
#include "health/evaluator.h"

#include <algorithm>

#include "common/check.h"
#include "fields/catalogue.h"
#include "fmt/format.h"
#include "health/occurrence.h"
#include "health/rules.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

std::string Ago(absl::Duration age) {
  return absl::FormatDuration(absl::Trunc(age, absl::Seconds(1)));
}

// Incident keys: one per GPU and XID code.
std::string XidKey(uint32_t xid) { return fmt::format("xid.{}", xid); }

// Whether `kept` (an incident's latest log record) is `position` or a later record of its log.
bool Covers(const std::optional<LogPosition>& kept, const LogPosition& position) {
  return kept.has_value() && kept->source == position.source && kept->sequence >= position.sequence;
}

}  // namespace

HealthEvaluator::HealthEvaluator(HealthPolicy policy, std::shared_ptr<const FieldLayout> layout,
                                 std::vector<GpuIdentity> gpus,
                                 std::vector<absl::Duration> intervals, IncidentSink* sink,
                                 RestoredHealth restored)
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
  const size_t slots = gpus_.size() + 1;  // the GPUs, then the node
  incidents_.resize(slots);
  active_.resize(slots);
  cleared_at_.assign(slots,
                     std::vector<absl::Time>(std::size(kHealthSystems), absl::InfinitePast()));
  counters_.resize(gpus_.size());
  xid_times_.resize(gpus_.size());
  unknown_.assign(gpus_.size(),
                  std::vector<std::string>(std::size(kGpuHealthSystems), "not evaluated yet"));
  node_unknown_.assign(std::size(kNodeHealthSystems), "not evaluated yet");
  attached_.assign(std::size(kHealthSystems), false);
  for (Incident& incident : restored.incidents) {
    VIGIL_CHECK(incident.node_level || incident.gpu < gpus_.size());
    const size_t slot = incident.node_level ? node_slot() : incident.gpu;
    incidents_[slot][incident.key] = std::move(incident);
  }
  for (const OperatorClear& clear : restored.clears) {
    size_t slot = node_slot();
    if (!clear.uuid.empty()) {
      auto gpu = std::find_if(gpus_.begin(), gpus_.end(),
                              [&](const GpuIdentity& g) { return g.uuid == clear.uuid; });
      if (gpu == gpus_.end()) continue;
      slot = static_cast<size_t>(gpu - gpus_.begin());
    }
    for (size_t s = 0; s < std::size(kHealthSystems); ++s) {
      if (clear.system && static_cast<size_t>(*clear.system) != s) continue;
      cleared_at_[slot][s] = std::max(cleared_at_[slot][s], clear.time);
    }
  }
  latest_ = BuildVerdict(0, absl::UnixEpoch());
}

void HealthEvaluator::AttachSource(HealthSystem system) {
  VIGIL_CHECK(IsFromSource(system));
  absl::MutexLock lock(&mutex_);
  VIGIL_CHECK(latest_->seq == 0);  // the systems listed stay the same for the engine's life
  attached_[static_cast<size_t>(system)] = true;
  latest_ = BuildVerdict(0, absl::UnixEpoch());
}

size_t HealthEvaluator::Index(FieldId field) const {
  VIGIL_CHECK(field < index_of_.size() && index_of_[field] >= 0);
  return static_cast<size_t>(index_of_[field]);
}

void HealthEvaluator::RecordXid(uint32_t gpu, uint32_t xid, absl::Time time, bool injected,
                                bool actions_allowed, std::string where,
                                std::optional<LogPosition> log_position) {
  if (gpu >= gpus_.size()) return;
  absl::MutexLock lock(&mutex_);
  pending_xids_.push_back({gpu, xid, time, injected, injected && actions_allowed, std::move(where),
                           std::move(log_position)});
}

void HealthEvaluator::NoteXidRecord(uint32_t gpu, uint32_t xid, LogPosition position) {
  if (gpu >= gpus_.size()) return;
  absl::MutexLock lock(&mutex_);
  pending_xids_.push_back({.gpu = gpu,
                           .xid = xid,
                           .injected = false,
                           .actions_allowed = false,
                           .log_position = std::move(position),
                           .counted = true});
}

bool HealthEvaluator::CountsXidRecord(uint32_t gpu, uint32_t xid,
                                      const LogPosition& position) const {
  return CountsRecord(gpu, XidKey(xid), position);
}

bool HealthEvaluator::CountsRecord(std::optional<uint32_t> gpu, const std::string& key,
                                   const LogPosition& position) const {
  if (gpu && *gpu >= gpus_.size()) return false;
  absl::MutexLock lock(&mutex_);
  return CountsRecordIn(gpu.value_or(node_slot()), key, position);
}

absl::Time HealthEvaluator::LastClear(std::optional<uint32_t> gpu, HealthSystem system) const {
  if (gpu && *gpu >= gpus_.size()) return absl::InfinitePast();
  absl::MutexLock lock(&mutex_);
  return cleared_at_[gpu.value_or(node_slot())][static_cast<size_t>(system)];
}

bool HealthEvaluator::CountsRecordIn(size_t slot, const std::string& key,
                                     const LogPosition& position) const {
  auto incident = incidents_[slot].find(key);
  return incident != incidents_[slot].end() && Covers(incident->second.log_position, position);
}

void HealthEvaluator::KeepRecord(const PendingXid& xid) {
  auto found = incidents_[xid.gpu].find(XidKey(xid.xid));
  if (found == incidents_[xid.gpu].end() || Covers(found->second.log_position, *xid.log_position)) {
    return;  // the XID made no incident (a warning's count, a clear): nothing to keep it in
  }
  Incident& incident = found->second;
  incident.log_position = xid.log_position;
  if (incident.status == HealthStatus::kFail && sink_ != nullptr) sink_->Raised(incident);
}

bool HealthEvaluator::ClearedSince(size_t slot, HealthSystem system, absl::Time time,
                                   std::string_view what) const {
  const absl::Time cleared = cleared_at_[slot][static_cast<size_t>(system)];
  if (time > cleared) return false;
  spdlog::info(
      "{} at {} happened before the last `vigil health clear` of {} {} ({}): not raised "
      "again",
      what, absl::FormatTime(time), slot == node_slot() ? "the node's" : "its GPU's",
      HealthSystemName(system), absl::FormatTime(cleared));
  return true;
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
             std::string action, RecommendedAction recommended, bool injected) override {
    conditions_->push_back({rule_->system, status, std::move(key), std::move(code),
                            std::move(message), std::move(action), injected,
                            injected && snapshot_.allows_actions(gpu_), recommended});
  }
  void RaiseWhileItHolds(HealthStatus status, std::string key, std::string code,
                         std::string message, std::string action, RecommendedAction recommended,
                         bool injected) override {
    Raise(status, std::move(key), std::move(code), std::move(message), std::move(action),
          recommended, injected);
    conditions_->back().sticky = false;
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

HealthEvaluator::Condition HealthEvaluator::ConditionOf(HealthSystem system,
                                                        const SourceFinding& finding) {
  Condition condition{system,
                      finding.status,
                      finding.key,
                      finding.code,
                      finding.message,
                      finding.action,
                      finding.injected,
                      /*actions_allowed=*/false,
                      finding.recommended};
  condition.sticky = finding.sticky;
  condition.expire_after = finding.expire_after;
  condition.log_position = finding.log_position;
  return condition;
}

std::string HealthEvaluator::SourceUnknown(HealthSystem system, size_t unknown_index) const {
  const bool attached = attached_[static_cast<size_t>(system)];
  auto report = reports_.find(system);
  if (!attached) return std::string(HealthSystemInfoOf(system).without_source);
  if (report == reports_.end()) return "not reported yet";
  const std::vector<std::string>& unknown = report->second.unknown;
  return unknown_index < unknown.size() ? unknown[unknown_index] : "";
}

void HealthEvaluator::SourceConditions(uint32_t gpu, std::vector<Condition>* conditions) {
  for (size_t s = 0; s < std::size(kGpuHealthSystems); ++s) {
    const HealthSystem system = kGpuHealthSystems[s];
    if (!IsFromSource(system)) continue;
    unknown_[gpu][s] = SourceUnknown(system, gpu);
    auto report = reports_.find(system);
    if (!attached_[static_cast<size_t>(system)] || report == reports_.end()) continue;
    for (const SourceFinding& finding : report->second.findings) {
      if (std::find(finding.gpus.begin(), finding.gpus.end(), gpu) == finding.gpus.end()) continue;
      conditions->push_back(ConditionOf(system, finding));
    }
  }
}

void HealthEvaluator::EvaluateOccurrences(
    const std::vector<std::pair<HealthSystem, SourceFinding>>& occurrences, absl::Time now) {
  for (const auto& [system, finding] : occurrences) {
    std::vector<size_t> slots;
    if (IsNodeLevel(system)) {
      slots.push_back(node_slot());
    } else {
      for (uint32_t gpu : finding.gpus) {
        if (gpu < gpus_.size()) slots.push_back(gpu);
      }
    }
    for (size_t slot : slots) {
      if (ClearedSince(slot, system, *finding.occurred, finding.message)) continue;
      Upsert(slot, ConditionOf(system, finding), now, /*onset=*/true, finding.expire_after);
    }
  }
}

void HealthEvaluator::EvaluateXids(absl::Time now) {
  std::vector<PendingXid> xids;
  xids.swap(pending_xids_);
  for (const PendingXid& xid : xids) {
    if (xid.counted) {
      KeepRecord(xid);
      continue;
    }
    const XidRule& rule = policy_.RuleFor(xid.xid);
    if (rule.severity == XidRule::Severity::kIgnore) continue;
    if (ClearedSince(xid.gpu, rule.system, xid.time,
                     fmt::format("GPU {}: XID {}", xid.gpu, xid.xid))) {
      continue;
    }
    const std::optional<OccurrenceVerdict> verdict =
        JudgeOccurrence(rule, xid.time, now, &xid_times_[xid.gpu][xid.xid]);
    if (!verdict) continue;
    Condition condition{rule.system,
                        verdict->status,
                        XidKey(xid.xid),
                        rule.code,
                        fmt::format("XID {}{}: {}{}", xid.xid, xid.where, rule.meaning,
                                    RepeatsText(rule, verdict->recent)),
                        rule.action,
                        xid.injected,
                        xid.actions_allowed,
                        rule.recommended};
    condition.log_position = xid.log_position;
    Upsert(xid.gpu, condition, now, /*onset=*/true, rule.window);
  }
}

void HealthEvaluator::Upsert(size_t slot, const Condition& condition, absl::Time now, bool onset,
                             absl::Duration expire_after) {
  auto [it, created] = incidents_[slot].try_emplace(condition.key);
  Incident& incident = it->second;
  const uint64_t old_count = incident.count;
  if (created) {
    const bool node_level = slot == node_slot();
    incident = Incident{.gpu = node_level ? 0 : static_cast<uint32_t>(slot),
                        .uuid = node_level ? "" : gpus_[slot].uuid,
                        .node_level = node_level,
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
  incident.recommended = policy_.RecommendedFor(condition.key, condition.recommended);
  incident.last_seen = now;
  // A real occurrence is never masked by a drill's: once real, the incident stays real.
  incident.injected = created ? condition.injected : incident.injected && condition.injected;
  incident.actions_allowed =
      created ? condition.actions_allowed : incident.actions_allowed || condition.actions_allowed;
  incident.expire_after = expire_after;
  incident.sticky = condition.sticky;
  if (condition.log_position.has_value() &&
      !Covers(incident.log_position, *condition.log_position)) {
    incident.log_position = condition.log_position;
  }
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
    case ValueStatus::kResetRequired:
      return "the driver serves the GPU again only after a reset";
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
    const Snapshot& snapshot, absl::Time now, std::vector<HealthTransition>* transitions,
    std::vector<SourceReport> reports) {
  absl::MutexLock lock(&mutex_);
  // Occurrences count once, at the evaluation that receives them; the rest holds until the next
  // report says otherwise.
  std::vector<std::pair<HealthSystem, SourceFinding>> occurrences;
  for (SourceReport& report : reports) {
    VIGIL_CHECK(attached_[static_cast<size_t>(report.system)]);
    std::erase_if(report.findings, [&](SourceFinding& finding) {
      if (!finding.occurred) return false;
      occurrences.emplace_back(report.system, std::move(finding));
      return true;
    });
    reports_[report.system] = std::move(report);
  }
  for (uint32_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    std::vector<Condition> conditions;
    bool reset_seen = false;
    EvaluateRules(gpu, snapshot, now, &conditions, &reset_seen);
    if (reset_seen) {
      // Sticky failures end with a GPU reset; what still holds is raised again just below. A
      // source's findings are not the GPU's (a NIC port does not reset with it): they stay.
      for (auto it = incidents_[gpu].begin(); it != incidents_[gpu].end();) {
        if (IsFromSource(it->second.system)) {
          ++it;
          continue;
        }
        if (sink_ != nullptr && it->second.status == HealthStatus::kFail) {
          sink_->Cleared(it->second, "GPU reset seen");
        }
        active_[gpu].erase(it->first);
        it = incidents_[gpu].erase(it);
      }
      spdlog::info(
          "GPU {} ({}): reset seen (volatile counters went back); its incidents are "
          "cleared",
          gpu, gpus_[gpu].uuid);
    }
    for (size_t s = 0; s < std::size(kGpuHealthSystems); ++s) {
      if (IsFromSource(kGpuHealthSystems[s])) continue;  // the source says (SourceConditions)
      unknown_[gpu][s] = UnknownReason(gpu, kGpuHealthSystems[s], snapshot, now);
    }
    SourceConditions(gpu, &conditions);
    std::map<std::string, bool> active;
    for (const Condition& condition : conditions) {
      Upsert(gpu, condition, now, /*onset=*/!active_[gpu].contains(condition.key),
             condition.expire_after.value_or(policy_.window));
      active[condition.key] = true;
    }
    active_[gpu] = std::move(active);
  }
  EvaluateXids(now);
  // The node-level systems: each from its source.
  std::vector<Condition> node_conditions;
  for (size_t s = 0; s < std::size(kNodeHealthSystems); ++s) {
    const HealthSystem system = kNodeHealthSystems[s];
    node_unknown_[s] = SourceUnknown(system, 0);
    auto report = reports_.find(system);
    if (report == reports_.end()) continue;
    for (const SourceFinding& finding : report->second.findings) {
      node_conditions.push_back(ConditionOf(system, finding));
    }
  }
  std::map<std::string, bool> node_active;
  for (const Condition& condition : node_conditions) {
    Upsert(node_slot(), condition, now, /*onset=*/!active_[node_slot()].contains(condition.key),
           condition.expire_after.value_or(policy_.window));
    node_active[condition.key] = true;
  }
  active_[node_slot()] = std::move(node_active);
  EvaluateOccurrences(occurrences, now);
  // WARN incidents that stopped holding expire, and FAILs of a state that ends by itself; other
  // FAIL incidents stay until cleared.
  for (size_t slot = 0; slot < incidents_.size(); ++slot) {
    for (auto it = incidents_[slot].begin(); it != incidents_[slot].end();) {
      const Incident& incident = it->second;
      const bool expired = (incident.status != HealthStatus::kFail || !incident.sticky) &&
                           !active_[slot].contains(incident.key) &&
                           now - incident.last_seen >= incident.expire_after;
      if (expired && incident.status == HealthStatus::kFail && sink_ != nullptr) {
        sink_->Cleared(incident, "the condition no longer holds");
      }
      it = expired ? incidents_[slot].erase(it) : std::next(it);
    }
  }
  std::shared_ptr<const HealthVerdict> verdict = BuildVerdict(snapshot.seq, snapshot.time);
  // The first evaluation is the baseline, not a change: it would otherwise report every
  // (GPU, system) going from "not evaluated" to its status at every engine start.
  const bool baseline = latest_->seq == 0;
  if (baseline) {
    spdlog::info("health baseline at seq {}: overall {}", verdict->seq,
                 HealthStatusName(verdict->overall));
  } else {
    // By system: one listed for a restored FAIL alone comes and goes with it (as PASS when absent).
    const auto compare_systems = [&](const std::vector<SystemHealth>& before_systems,
                                     const std::vector<SystemHealth>& now_systems, size_t slot,
                                     const std::string& uuid, bool node_level) {
      for (const SystemHealth& now_system : now_systems) {
        auto before = std::find_if(
            before_systems.begin(), before_systems.end(),
            [&](const SystemHealth& system) { return system.system == now_system.system; });
        Compare(
            before != before_systems.end() ? *before : SystemHealth{.system = now_system.system},
            now_system, slot, uuid, node_level, transitions);
      }
    };
    for (size_t g = 0; g < verdict->gpus.size(); ++g) {
      compare_systems(latest_->gpus[g].systems, verdict->gpus[g].systems, g, gpus_[g].uuid,
                      /*node_level=*/false);
    }
    compare_systems(latest_->node_systems, verdict->node_systems, 0, "", /*node_level=*/true);
  }
  latest_ = verdict;
  return verdict;
}

void HealthEvaluator::Compare(const SystemHealth& before, const SystemHealth& now, size_t slot,
                              const std::string& uuid, bool node_level,
                              std::vector<HealthTransition>* transitions) {
  if (now.status == before.status) return;
  std::string summary = now.unknown_reason;
  bool injected = false;
  for (const Incident& incident : now.incidents) {
    summary +=
        fmt::format("{}{}: {}", summary.empty() ? "" : "; ", incident.code, incident.message);
    injected |= incident.injected;
  }
  transitions->push_back({.gpu = static_cast<uint32_t>(slot),
                          .uuid = uuid,
                          .node_level = node_level,
                          .system = now.system,
                          .from = before.status,
                          .to = now.status,
                          .summary = std::move(summary),
                          .injected = injected});
}

SystemHealth HealthEvaluator::SystemHealthOf(size_t slot, HealthSystem which,
                                             std::string unknown_reason) const {
  SystemHealth system;
  system.system = which;
  for (const auto& [key, incident] : incidents_[slot]) {
    if (incident.system != which) continue;
    system.incidents.push_back(incident);
    system.status = Worst(system.status, incident.status);
  }
  system.unknown_reason = std::move(unknown_reason);
  if (!system.unknown_reason.empty()) system.status = Worst(system.status, HealthStatus::kUnknown);
  return system;
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
    for (size_t s = 0; s < std::size(kGpuHealthSystems); ++s) {
      const HealthSystem which = kGpuHealthSystems[s];
      if (IsFromSource(which) && !attached_[static_cast<size_t>(which)] &&
          std::none_of(incidents_[gpu].begin(), incidents_[gpu].end(),
                       [&](const auto& entry) { return entry.second.system == which; })) {
        continue;  // nothing reads it on this node
      }
      health.systems.push_back(SystemHealthOf(gpu, which, unknown_[gpu][s]));
      health.status = Worst(health.status, health.systems.back().status);
    }
    verdict->overall = Worst(verdict->overall, health.status);
  }
  // A node-level system is listed where its source is — or where a failure restored from the
  // state dir is still there: it must not vanish because nothing reads its source now.
  for (size_t s = 0; s < std::size(kNodeHealthSystems); ++s) {
    const HealthSystem which = kNodeHealthSystems[s];
    if (!attached_[static_cast<size_t>(which)] &&
        std::none_of(incidents_[node_slot()].begin(), incidents_[node_slot()].end(),
                     [&](const auto& entry) { return entry.second.system == which; })) {
      continue;
    }
    verdict->node_systems.push_back(SystemHealthOf(node_slot(), which, node_unknown_[s]));
    verdict->overall = Worst(verdict->overall, verdict->node_systems.back().status);
  }
  return verdict;
}

std::vector<Incident> HealthEvaluator::ClearSlot(size_t slot, std::optional<HealthSystem> system,
                                                 const std::string& reason, absl::Time now) {
  std::vector<Incident> cleared;
  for (auto it = incidents_[slot].begin(); it != incidents_[slot].end();) {
    if (system && it->second.system != *system) {
      ++it;
      continue;
    }
    if (sink_ != nullptr && it->second.status == HealthStatus::kFail) {
      sink_->Cleared(it->second, reason);
    }
    active_[slot].erase(it->first);
    cleared.push_back(std::move(it->second));
    it = incidents_[slot].erase(it);
  }
  const bool node_level = slot == node_slot();
  for (size_t s = 0; s < std::size(kHealthSystems); ++s) {
    if (kHealthSystems[s].node_level != node_level) continue;
    if (system && static_cast<size_t>(*system) != s) continue;
    cleared_at_[slot][s] = std::max(cleared_at_[slot][s], now);
  }
  // The count rules start again too: what was counted before the clear is history (a source's
  // own counts start again when the engine tells it, HealthSource::Cleared).
  if (!node_level) {
    std::erase_if(xid_times_[slot], [&](const auto& entry) {
      return !system || policy_.RuleFor(entry.first).system == *system;
    });
  }
  if (sink_ != nullptr) {
    sink_->OperatorCleared(
        {.uuid = node_level ? "" : gpus_[slot].uuid, .system = system, .time = now});
  }
  return cleared;
}

std::vector<Incident> HealthEvaluator::Clear(uint32_t gpu, std::optional<HealthSystem> system,
                                             const std::string& reason, absl::Time now) {
  if (gpu >= gpus_.size() || (system && IsNodeLevel(*system))) return {};
  absl::MutexLock lock(&mutex_);
  return ClearSlot(gpu, system, reason, now);
}

std::vector<Incident> HealthEvaluator::ClearNode(std::optional<HealthSystem> system,
                                                 const std::string& reason, absl::Time now) {
  if (system && !IsNodeLevel(*system)) return {};
  absl::MutexLock lock(&mutex_);
  return ClearSlot(node_slot(), system, reason, now);
}

std::shared_ptr<const HealthVerdict> HealthEvaluator::Latest() const {
  absl::MutexLock lock(&mutex_);
  return latest_;
}

}  // namespace vigil
