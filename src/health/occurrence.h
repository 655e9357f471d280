// How one occurrence of an event judged by an XID-like rule (an XID on a GPU, an SXid on an
// NVSwitch) turns into a status: ignored, history (its window passed before the engine saw it), a
// count still below its rule's, or WARN/FAIL. The one judgement both the evaluator's XIDs and the
// nvswitch source's SXids use. Pure functions over the caller's recent-occurrence times; the
// caller owns and guards them.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "health/policy.h"

namespace vigil {

struct OccurrenceVerdict {
  HealthStatus status = HealthStatus::kWarn;
  size_t recent = 0;  // occurrences within the rule's window, this one included
};

// Judges one more occurrence at `time`, seen at `now`, under `rule`; `recent` holds the earlier
// occurrences of the same incident (updated: this one added, those past the window dropped).
// nullopt: nothing to raise — the rule ignores it; a WARN or a count whose window had passed
// before it was seen (an old kernel-log line replayed at start: history, not health; a FAIL is
// sticky, so it counts however old); or a count rule below its count.
std::optional<OccurrenceVerdict> JudgeOccurrence(const XidRule& rule, absl::Time time,
                                                 absl::Time now, std::deque<absl::Time>* recent);

// " (3 in the last 1h, warning at 4)" for a count rule, "" otherwise: the incident message's tail.
std::string RepeatsText(const XidRule& rule, size_t recent);

}  // namespace vigil
