// DCGM's health rules as a table: each rule names the system it judges, the fields it reads and
// how it judges them, with its texts (DCGM_FR_* code, message, recommended action) in its
// evaluation. A system's inputs — the fields whose missing or stale value makes it UNKNOWN — are
// the union of its rules' inputs, so the two cannot drift apart; the evaluator also checks, as
// each rule runs, that it reads only its listed inputs (a broken invariant crashes loudly).
// Rules are pure functions of what RuleContext gives them; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "fields/value.h"
#include "health/policy.h"

namespace vigil {

// What a rule sees of one GPU at one evaluation, and where it reports a finding. Implemented by
// the evaluator.
class RuleContext {
 public:
  virtual ~RuleContext() = default;
  virtual const HealthPolicy& policy() const = 0;
  // The latest value of an input field (any status).
  virtual const FieldValue& Value(FieldId field) = 0;
  // A cumulative input's increase over the policy's window; nullopt when it has no usable value.
  // *injected is set when the latest sample was injected.
  virtual std::optional<int64_t> WindowDelta(FieldId field, bool* injected) = 0;
  // How long the window samples of a cumulative input span (at least 1 s), for rates.
  virtual absl::Duration WindowSpan(FieldId field) = 0;
  // The GPU's read status as a whole (kOk, kGpuLost, kTimeout, ...).
  virtual ValueStatus GpuRead() const = 0;
  // Reports that the rule's condition holds now. `key` identifies the incident
  // ("pcie.replay_rate"); `recommended` is the rule's machine-readable action (the policy's
  // `health.recommended` may override it by key).
  virtual void Raise(HealthStatus status, std::string key, std::string code, std::string message,
                     std::string action, RecommendedAction recommended, bool injected) = 0;
  // As Raise(), for a state that can end without a reset (the fabric manager not yet trained):
  // even a FAIL lasts only while the condition holds, and ends as a WARN does.
  virtual void RaiseWhileItHolds(HealthStatus status, std::string key, std::string code,
                                 std::string message, std::string action,
                                 RecommendedAction recommended, bool injected) = 0;
};

struct HealthRule {
  std::string_view name;  // the rule, and the prefix of the incident keys it raises
  HealthSystem system;
  std::vector<FieldId> inputs;  // every field the rule reads
  void (*evaluate)(RuleContext& context);
};

// Every rule, in evaluation order.
const std::vector<HealthRule>& HealthRules();
// The fields behind a system: the union of its rules' inputs, in rule order.
const std::vector<FieldId>& InputsOf(HealthSystem system);

}  // namespace vigil
