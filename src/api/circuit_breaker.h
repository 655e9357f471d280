// The tainted-share circuit breaker as the remediator publishes it and the health checks read it:
// one small ConfigMap (NAMESPACE/vigil-circuit-breaker by default) whose data say whether a GPU
// node may still be tainted, with the counts the decision was made on. The remediator is the one
// component that watches every GPU node, so it counts; each health check watches this one object
// (fieldSelector metadata.name) instead of the fleet, so its API cost does not grow with the
// fleet. The remediator writes the object when the breaker opens or closes, and renews it every
// kBreakerRenewEvery so a check can tell a live decision from one left behind by a remediator that
// is gone (older than kBreakerStaleAfter: not used). One place for the keys and their meaning, so
// writer and readers cannot drift apart. Pure functions and plain structs; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace vigil {

inline constexpr std::string_view kBreakerConfigMapName = "vigil-circuit-breaker";
inline constexpr std::string_view kDefaultBreakerNamespace = "vigil";
// The remediator re-writes the object this often while nothing changes (renewedAt), and a check
// uses it only while it is younger than kBreakerStaleAfter: three renewals missed is a remediator
// that is gone or stuck.
inline constexpr absl::Duration kBreakerRenewEvery = absl::Minutes(5);
inline constexpr absl::Duration kBreakerStaleAfter = absl::Minutes(15);

// The breaker's state: closed lets a GPU node be tainted, open refuses (as an electrical
// breaker: closed, current flows).
enum class BreakerState : uint8_t { kClosed, kOpen };
std::string_view BreakerStateName(BreakerState state);  // "closed", "open"

struct PublishedBreaker {
  BreakerState state = BreakerState::kClosed;
  std::string taint_key;         // the taint counted: a check with another key cannot use it
  size_t tainted_nodes = 0;      // GPU nodes carrying it when decided
  size_t gpu_nodes = 0;          // GPU nodes (the remediator's --gpu-node-selector)
  size_t max_tainted_nodes = 0;  // MaxTaintedNodes(share, gpu_nodes)
  // GPUs out of service (every GPU of a tainted node, and each GPU a DeviceTaintRule quarantines)
  // of the GPUs counted (nodes that say how many they have), and the most that may be: the same
  // share applied to GPUs. Absent (0) from a remediator older than per-GPU quarantine.
  size_t out_of_service_gpus = 0, gpus = 0, max_out_of_service_gpus = 0;
  double max_tainted_share = 0.5;
  absl::Time changed;      // when the state last changed
  absl::Time renewed;      // the remediator's last write
  std::string decided_by;  // the remediator replica

  // Whether the counts and state differ (the times and the replica left aside).
  bool SameDecision(const PublishedBreaker& other) const;
};

// The decision a count of GPU nodes gives: open when `tainted` already reaches the limit, so one
// more taint would exceed max(1, floor(share x gpu_nodes)).
BreakerState DecideBreaker(size_t tainted, size_t gpu_nodes, double max_tainted_share);
// The same decision over nodes and GPUs: open when either count already reaches its limit (no
// GPUs counted: the nodes alone).
BreakerState DecideBreaker(size_t tainted, size_t gpu_nodes, size_t out_of_service_gpus,
                           size_t gpus, double max_tainted_share);

// The ConfigMap's `data` (string values, as a ConfigMap holds them).
nlohmann::json BreakerToData(const PublishedBreaker& breaker);
// Reads `data` back; InvalidArgument naming the key that is missing or malformed.
absl::StatusOr<PublishedBreaker> BreakerFromData(const nlohmann::json& data);

}  // namespace vigil
