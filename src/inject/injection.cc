// Implements the injection table.
#include "inject/injection.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "fmt/format.h"

namespace vigil {

std::string InjectionRecord::Describe() const {
  if (mode == InjectionMode::kXid) return fmt::format("GPU {} XID {}", gpu, xid);
  const FieldInfo* info = FindField(field);
  const std::string name = !nic_port.empty() ? fmt::format("NIC port {} {}", nic_port, port_field)
                           : info != nullptr ? fmt::format("GPU {} {}", gpu, info->name)
                                             : fmt::format("GPU {} {}", gpu, field);
  const std::string change =
      mode == InjectionMode::kAdd
          ? fmt::format("+= {}", add)
          : fmt::format("= {}", value.ok() && std::holds_alternative<int64_t>(value.value)
                                    ? std::to_string(value.as_int())
                                    : fmt::format("{}", value.numeric()));
  return fmt::format("{} {} for {}", name, change, absl::FormatDuration(expire - start));
}

InjectionTable::InjectionTable(std::shared_ptr<const FieldLayout> layout, uint32_t gpu_count,
                               InjectionLimits limits)
    : layout_(std::move(layout)), gpu_count_(gpu_count), limits_(limits) {}

absl::StatusOr<InjectionRecord> InjectionTable::AddField(
    const FieldInjectionRequest& request, const FieldValue& real, const Principal& principal,
    absl::Time now, std::optional<InjectionRecord>* superseded) {
  if (request.gpu >= gpu_count_) {
    return absl::InvalidArgumentError(
        fmt::format("GPU {} does not exist: this engine has {} GPU{} (0-{})", request.gpu,
                    gpu_count_, gpu_count_ == 1 ? "" : "s", gpu_count_ - 1));
  }
  const std::optional<size_t> index = layout_->IndexOf(request.field);
  if (!index) {
    return absl::InvalidArgumentError(fmt::format(
        "unknown field ID {}: `vigil info --fields` lists the fields this engine samples",
        request.field));
  }
  const FieldInfo& field = layout_->field(*index);
  if (field.type == FieldType::kString) {
    return absl::InvalidArgumentError(
        fmt::format("{} is a string field: only numeric fields can be injected", field.name));
  }
  if (field.from_events) {
    return absl::InvalidArgumentError(fmt::format(
        "{} follows XID events: inject an XID instead (`vigil inject xid`)", field.name));
  }
  if (request.value.has_value() == request.add.has_value()) {
    return absl::InvalidArgumentError("give exactly one of a value and an amount to add");
  }
  absl::StatusOr<InjectionRecord> started =
      Start(request.duration, principal, now, request.scenario_id, request.allow_actions);
  if (!started.ok()) return started.status();
  InjectionRecord& record = *started;
  record.gpu = request.gpu;
  record.field = request.field;
  if (request.add) {
    if (!field.cumulative) {
      return absl::InvalidArgumentError(fmt::format(
          "{} is not a cumulative counter: --add only applies to counters (ECC, replays, "
          "violation time, energy); use --value",
          field.name));
    }
    if (*request.add <= 0) {
      return absl::InvalidArgumentError("--add needs a positive amount: counters only grow");
    }
    record.mode = InjectionMode::kAdd;
    record.add = *request.add;
  } else {
    const double value = *request.value;
    if (!std::isfinite(value)) return absl::InvalidArgumentError("the value must be finite");
    record.mode = InjectionMode::kValue;
    if (field.type == FieldType::kInt64) {
      if (value != std::trunc(value) || std::abs(value) > 9.0e18) {
        return absl::InvalidArgumentError(
            fmt::format("{} takes an integer; {} is not one", field.name, value));
      }
      record.value = FieldValue::Int(static_cast<int64_t>(value));
      if (field.cumulative && real.ok() && record.value.as_int() < real.as_int()) {
        return absl::InvalidArgumentError(fmt::format(
            "{} is a cumulative counter at {} on GPU {}: a lower value would make it go "
            "backwards; use --add to raise it",
            field.name, real.as_int(), request.gpu));
      }
    } else {
      record.value = FieldValue::Double(value);
    }
    record.value.injected = true;
  }

  return Insert({.gpu = request.gpu, .field_index = *index}, std::move(record), superseded);
}

absl::StatusOr<InjectionRecord> InjectionTable::AddPort(
    const PortInjectionRequest& request, const Principal& principal, absl::Time now,
    std::optional<InjectionRecord>* superseded) {
  if (request.port.empty() || request.field.empty()) {
    return absl::InvalidArgumentError("name the NIC port and its field");
  }
  if (request.value.has_value() == request.add.has_value()) {
    return absl::InvalidArgumentError("give exactly one of a value and an amount to add");
  }
  absl::StatusOr<InjectionRecord> started =
      Start(request.duration, principal, now, request.scenario_id, request.allow_actions);
  if (!started.ok()) return started.status();
  InjectionRecord& record = *started;
  record.nic_port = request.port;
  record.port_field = request.field;
  if (request.add.has_value()) {
    if (*request.add <= 0) {
      return absl::InvalidArgumentError("--add needs a positive amount: counters only grow");
    }
    record.mode = InjectionMode::kAdd;
    record.add = *request.add;
  } else {
    if (!std::isfinite(*request.value)) {
      return absl::InvalidArgumentError("the value must be finite");
    }
    record.mode = InjectionMode::kValue;
    record.value = *request.value == std::trunc(*request.value) && std::abs(*request.value) < 9.0e18
                       ? FieldValue::Int(static_cast<int64_t>(*request.value))
                       : FieldValue::Double(*request.value);
    record.value.injected = true;
  }
  return Insert({.port = request.port, .port_field = request.field}, std::move(record), superseded);
}

absl::StatusOr<InjectionRecord> InjectionTable::Start(absl::Duration requested,
                                                      const Principal& principal, absl::Time now,
                                                      const std::string& scenario_id,
                                                      bool allow_actions) const {
  if (requested < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the duration cannot be negative");
  }
  const absl::Duration duration =
      requested == absl::ZeroDuration() ? limits_.default_duration : requested;
  if (duration > limits_.max_duration) {
    return absl::InvalidArgumentError(fmt::format(
        "{} is longer than this engine's maximum injection of {} (injection.max_duration)",
        absl::FormatDuration(duration), absl::FormatDuration(limits_.max_duration)));
  }
  InjectionRecord record;
  record.principal = principal;
  record.start = now;
  record.expire = now + duration;
  record.scenario_id = scenario_id;
  record.allow_actions = allow_actions;
  return record;
}

absl::StatusOr<InjectionRecord> InjectionTable::Insert(const Key& key, InjectionRecord record,
                                                       std::optional<InjectionRecord>* superseded) {
  absl::MutexLock lock(&mutex_);
  auto existing = active_.find(key);
  if (existing == active_.end() && active_.size() >= limits_.max_active) {
    return absl::ResourceExhaustedError(fmt::format(
        "{} injections are already active, the limit: clear some first", active_.size()));
  }
  record.id = fmt::format("inj-{}", next_id_++);
  superseded->reset();
  if (existing != active_.end()) {
    *superseded = std::move(existing->second);
    active_.erase(existing);
  }
  active_.emplace(key, record);
  return record;
}

InjectionRecord InjectionTable::EraseLocked(std::map<Key, InjectionRecord>::iterator* it) {
  if ((*it)->first.port.empty()) ended_.insert((*it)->first.field_index);
  InjectionRecord record = std::move((*it)->second);
  *it = active_.erase(*it);
  return record;
}

absl::StatusOr<InjectionRecord> InjectionTable::MakeXid(const XidInjectionRequest& request,
                                                        const Principal& principal,
                                                        absl::Time now) {
  const uint32_t gpu = request.gpu;
  const uint32_t xid = request.xid;
  if (gpu >= gpu_count_) {
    return absl::InvalidArgumentError(
        fmt::format("GPU {} does not exist: this engine has {} GPU{} (0-{})", gpu, gpu_count_,
                    gpu_count_ == 1 ? "" : "s", gpu_count_ - 1));
  }
  if (xid == 0 || xid > 999) {
    return absl::InvalidArgumentError(
        fmt::format("XID {} is out of range: NVIDIA's XIDs are 1 to 999", xid));
  }
  InjectionRecord record;
  record.gpu = gpu;
  record.xid = xid;
  record.mode = InjectionMode::kXid;
  record.principal = principal;
  record.start = record.expire = now;
  record.scenario_id = request.scenario_id;
  record.allow_actions = request.allow_actions;
  absl::MutexLock lock(&mutex_);
  record.id = fmt::format("inj-{}", next_id_++);
  return record;
}

absl::StatusOr<InjectionRecord> InjectionTable::Clear(const std::string& id) {
  std::vector<InjectionRecord> cleared =
      ClearIf([&](const InjectionRecord& record) { return record.id == id; });
  if (cleared.empty()) {
    return absl::NotFoundError(
        fmt::format("no active injection {}: `vigil inject list` shows the active ones", id));
  }
  return std::move(cleared.front());
}

std::vector<InjectionRecord> InjectionTable::ClearAll() {
  return ClearIf([](const InjectionRecord&) { return true; });
}

std::vector<InjectionRecord> InjectionTable::ClearScenario(const std::string& scenario_id) {
  return ClearIf([&](const InjectionRecord& record) { return record.scenario_id == scenario_id; });
}

std::vector<InjectionRecord> InjectionTable::ClearField(uint32_t gpu, FieldId field) {
  return ClearIf([&](const InjectionRecord& record) {
    return record.nic_port.empty() && record.gpu == gpu && record.field == field;
  });
}

std::vector<InjectionRecord> InjectionTable::ClearPortField(const std::string& port,
                                                            const std::string& field) {
  return ClearIf([&](const InjectionRecord& record) {
    return record.nic_port == port && record.port_field == field;
  });
}

std::vector<InjectionRecord> InjectionTable::ClearGpu(uint32_t gpu) {
  return ClearIf(
      [&](const InjectionRecord& record) { return record.nic_port.empty() && record.gpu == gpu; });
}

std::vector<InjectionRecord> InjectionTable::ClearIf(
    const std::function<bool(const InjectionRecord&)>& match) {
  absl::MutexLock lock(&mutex_);
  std::vector<InjectionRecord> cleared;
  for (auto it = active_.begin(); it != active_.end();) {
    if (match(it->second)) {
      cleared.push_back(EraseLocked(&it));
    } else {
      ++it;
    }
  }
  return cleared;
}

std::vector<InjectionRecord> InjectionTable::List() const {
  absl::MutexLock lock(&mutex_);
  std::vector<InjectionRecord> records;
  for (const auto& [key, record] : active_) records.push_back(record);
  return records;
}

std::vector<bool> InjectionTable::ActionGpus(uint32_t gpu_count) const {
  std::vector<bool> allows(gpu_count, false);
  absl::MutexLock lock(&mutex_);
  for (const auto& [key, record] : active_) {
    // A port's GPUs are the engine's to find (the source knows them).
    if (record.allow_actions && record.nic_port.empty() && record.gpu < gpu_count) {
      allows[record.gpu] = true;
    }
  }
  return allows;
}

std::vector<InjectionRecord> InjectionTable::PortInjections() const {
  absl::MutexLock lock(&mutex_);
  std::vector<InjectionRecord> records;
  for (const auto& [key, record] : active_) {
    if (!key.port.empty()) records.push_back(record);
  }
  return records;
}

std::vector<InjectionRecord> InjectionTable::Expire(absl::Time now) {
  absl::MutexLock lock(&mutex_);
  std::vector<InjectionRecord> expired;
  for (auto it = active_.begin(); it != active_.end();) {
    if (it->second.expire <= now) {
      expired.push_back(EraseLocked(&it));
    } else {
      ++it;
    }
  }
  return expired;
}

void InjectionTable::ForcedFields(std::set<size_t>* fields) {
  absl::MutexLock lock(&mutex_);
  for (const auto& [key, record] : active_) {
    if (key.port.empty()) fields->insert(key.field_index);
  }
  for (const auto& [key, floor] : floors_) fields->insert(key.second);
  fields->insert(ended_.begin(), ended_.end());
  ended_.clear();
}

bool InjectionTable::Empty() const {
  absl::MutexLock lock(&mutex_);
  return floors_.empty() && std::none_of(active_.begin(), active_.end(), [](const auto& entry) {
           return entry.first.port.empty();
         });
}

void InjectionTable::Apply(uint32_t gpu, size_t field_index, FieldValue* value) {
  absl::MutexLock lock(&mutex_);
  const std::pair<uint32_t, size_t> key{gpu, field_index};
  auto active = active_.find(Key{.gpu = gpu, .field_index = field_index});
  auto floor = floors_.find(key);
  if (active == active_.end() && floor == floors_.end()) return;
  const bool cumulative = layout_->field(field_index).cumulative;
  FieldValue candidate = *value;
  if (active != active_.end()) {
    const InjectionRecord& record = active->second;
    if (record.mode == InjectionMode::kValue) {
      candidate = record.value;
    } else if (value->ok()) {  // kAdd: follows the real counter; nothing to add to without one
      candidate = FieldValue::Int(value->as_int() + record.add);
      candidate.injected = true;
    }
  }
  if (!cumulative) {
    *value = candidate;
    return;
  }
  // Counters: never below what was last published while injected.
  if (candidate.ok() && floor != floors_.end() && candidate.as_int() < floor->second) {
    candidate = FieldValue::Int(floor->second);
    candidate.injected = true;
  }
  const bool real_caught_up = active == active_.end() && value->ok() && candidate == *value;
  if (real_caught_up) {
    floors_.erase(key);  // the real counter is at or past every value published while injected
  } else if (candidate.ok()) {
    floors_[key] = candidate.as_int();
  }
  *value = candidate;
}

}  // namespace vigil
