// Implements the nvswitch source: SXids judged by the policy's rules into the node's occurrences.
#include "nvswitch/sxid_source.h"

#include <utility>

#include "fmt/format.h"
#include "health/occurrence.h"
#include "spdlog/spdlog.h"

namespace vigil::nvswitch {

std::string SxidIncidentKey(const SxidEvent& sxid) {
  return fmt::format("sxid.{}.{}", sxid.sxid, sxid.pci_bus_id);
}

SxidSource::SxidSource(HealthPolicy policy, std::function<kmsg::LogState()> log_state,
                       std::function<bool(const std::string&, const LogPosition&)> counted)
    : policy_(std::move(policy)), log_state_(std::move(log_state)), counted_(std::move(counted)) {}

bool SxidSource::OnSxid(const SxidEvent& sxid) {
  if (sxid.log_position.has_value() && counted_(SxidIncidentKey(sxid), *sxid.log_position)) {
    spdlog::info(
        "NVSwitch {}: SXid {} of the kernel log ({} record {}) already counted before a restart",
        sxid.nvswitch, sxid.sxid, sxid.log_position->source, sxid.log_position->sequence);
    return false;
  }
  absl::MutexLock lock(&mutex_);
  pending_.push_back(sxid);
  return true;
}

void SxidSource::Cleared(std::optional<uint32_t> gpu, absl::Time at) {
  if (gpu.has_value()) return;  // a GPU's clear: the node's switches are not its
  absl::MutexLock lock(&mutex_);
  cleared_at_ = std::max(cleared_at_, at);
  const absl::Time cleared = cleared_at_;
  for (auto& [key, times] : recent_) {
    std::erase_if(times, [cleared](absl::Time time) { return time <= cleared; });
  }
}

std::string SxidSource::UnknownReason(kmsg::LogState state) {
  switch (state) {
    case kmsg::LogState::kReading:
      return "";
    case kmsg::LogState::kNotStarted:
      return "the kernel log is not read yet: NVSwitch errors (SXids) cannot be seen";
    case kmsg::LogState::kAbsent:
      return "the kernel log is absent: NVSwitch errors (SXids) cannot be seen";
    case kmsg::LogState::kUnreadable:
      return "the kernel log cannot be read (the engine needs read access to /dev/kmsg, and "
             "CAP_SYSLOG where kernel.dmesg_restrict=1): NVSwitch errors (SXids) cannot be seen";
  }
  return "the kernel log's state is not known";
}

std::vector<SourceReport> SxidSource::Judge(absl::Time now) {
  SourceReport report{.system = HealthSystem::kNvswitch, .unknown = {UnknownReason(log_state_())}};
  absl::MutexLock lock(&mutex_);
  std::vector<SxidEvent> sxids;
  sxids.swap(pending_);
  for (const SxidEvent& sxid : sxids) {
    const XidRule& rule = policy_.SxidRuleFor(sxid.sxid, sxid.fatal);
    if (rule.severity == XidRule::Severity::kIgnore) continue;
    const std::string key = SxidIncidentKey(sxid);
    OccurrenceVerdict verdict{.status = rule.severity == XidRule::Severity::kFail
                                            ? HealthStatus::kFail
                                            : HealthStatus::kWarn};
    if (sxid.time > cleared_at_) {
      std::optional<OccurrenceVerdict> judged =
          JudgeOccurrence(rule, sxid.time, now, &recent_[key]);
      if (!judged) continue;
      verdict = *judged;
    }  // else: it happened before the last clear: not counted, and the evaluator raises nothing
    const std::string what =
        fmt::format("NVSwitch {} ({}): SXid {}", sxid.nvswitch, sxid.pci_bus_id, sxid.sxid);
    std::string message =
        fmt::format("{}{}: {}{}", what, sxid.link ? fmt::format(", link {}", *sxid.link) : "",
                    rule.meaning, RepeatsText(rule, verdict.recent));
    if (!sxid.detail.empty()) message += fmt::format(" ({})", sxid.detail);
    report.findings.push_back({.status = verdict.status,
                               .key = key,
                               .code = rule.code,
                               .message = std::move(message),
                               .action = rule.action,
                               .recommended = rule.recommended,
                               .expire_after = rule.window,
                               .occurred = sxid.time,
                               .log_position = sxid.log_position});
  }
  return {std::move(report)};
}

}  // namespace vigil::nvswitch
