// Implements the judgement of one occurrence under an XID-like rule.
#include "health/occurrence.h"

#include "fmt/format.h"

namespace vigil {

std::optional<OccurrenceVerdict> JudgeOccurrence(const XidRule& rule, absl::Time time,
                                                 absl::Time now, std::deque<absl::Time>* recent) {
  if (rule.severity == XidRule::Severity::kIgnore) return std::nullopt;
  if (rule.severity != XidRule::Severity::kFail && time < now - rule.window) return std::nullopt;
  recent->push_back(time);
  while (!recent->empty() && recent->front() < now - rule.window) recent->pop_front();
  if (rule.severity == XidRule::Severity::kCount && recent->size() < rule.count)
    return std::nullopt;
  return OccurrenceVerdict{.status = rule.severity == XidRule::Severity::kFail
                                         ? HealthStatus::kFail
                                         : HealthStatus::kWarn,
                           .recent = recent->size()};
}

std::string RepeatsText(const XidRule& rule, size_t recent) {
  if (rule.severity != XidRule::Severity::kCount) return "";
  return fmt::format(" ({} in the last {}, warning at {})", recent,
                     absl::FormatDuration(rule.window), rule.count);
}

}  // namespace vigil
