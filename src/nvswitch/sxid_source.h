// The nvswitch source: the node's NVSwitch errors (SXids, read from the kernel log by kmsg/)
// judged by the policy's SXid rules (count, window, severity as the driver words it, or as the
// config says) and reported as the node-level `nvswitch` system (health/source.h), each SXid an
// occurrence: the evaluator raises it as an incident of the node, keyed per switch and code, with
// its kernel-log record kept so a restart that reads the log again does not count it twice. While
// the kernel log cannot be read, the system is UNKNOWN, never PASS.
//
// Threading: Judge() on the tick thread (HealthSource); OnSxid() from the kernel log's thread;
// Cleared() from gRPC threads; all thread-safe behind one mutex that no I/O is done under.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "health/policy.h"
#include "health/source.h"
#include "kmsg/log_source.h"

namespace vigil::nvswitch {

// The identity of the incident an SXid counts in: one per switch and code (the same code on
// another switch is another fault). "sxid.20034.00000000:06:00.0".
std::string SxidIncidentKey(const SxidEvent& sxid);

class SxidSource final : public HealthSource {
 public:
  // `log_state`: the kernel log's state now (called on the tick thread). `counted(key, position)`:
  // whether the node's incident `key` already counts that kernel-log record (the evaluator's
  // CountsRecord), asked as each SXid arrives. Both must outlive the source.
  SxidSource(HealthPolicy policy, std::function<kmsg::LogState()> log_state,
             std::function<bool(const std::string&, const LogPosition&)> counted);

  std::vector<HealthSystem> systems() const override { return {HealthSystem::kNvswitch}; }
  std::vector<SourceReport> Judge(absl::Time now) override;
  // Keeps the SXid for the next Judge(), unless its incident already counts its kernel-log record
  // (read again after a restart): then it is logged and dropped (false).
  bool OnSxid(const SxidEvent& sxid) override;
  void Cleared(std::optional<uint32_t> gpu, absl::Time at) override;

 private:
  // Why the kernel log's state keeps the system from being judged; "" when it is read.
  static std::string UnknownReason(kmsg::LogState state);

  const HealthPolicy policy_;
  const std::function<kmsg::LogState()> log_state_;
  const std::function<bool(const std::string&, const LogPosition&)> counted_;

  absl::Mutex mutex_;
  std::vector<SxidEvent> pending_ ABSL_GUARDED_BY(mutex_);
  // Per incident key: recent occurrence times, for the count rules.
  std::map<std::string, std::deque<absl::Time>> recent_ ABSL_GUARDED_BY(mutex_);
  // The last operator clear: what happened before it is not counted again.
  absl::Time cleared_at_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
};

}  // namespace vigil::nvswitch
