// Whether this node may be tainted now: the tainted-share circuit breaker as the health check
// applies it, without watching the fleet. The decision is the remediator's (api/circuit_breaker.h):
// the check watches that one ConfigMap (fieldSelector metadata.name, an informer of one object)
// and obeys it while it is fresh and counts the same taint. When it cannot see one — no
// remediator deployed, the object missing, stale (not renewed for kBreakerStaleAfter), unreadable,
// or about another taint key — it falls back to today's rule on its own count: one paginated LIST
// of the GPU nodes (from the API server's watch cache) at the moment a taint is to be decided,
// which a check makes on its node's transition to FAIL; a refusal so counted stands for
// kOwnCountEvery before the next count (a node that stays refused must not LIST the fleet every
// pass — at a fleet-wide false alarm that is every node). Either way the answer says which
// source decided, and /status and /metrics say whether the remediator's breaker is seen.
// Threads: the informer's (`vigil-informer`, after Start()). Decide() from one thread at a time
// (the reporter's); StatusJson(), Metrics() and stats() from any thread.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "api/circuit_breaker.h"
#include "common/clock.h"
#include "kube/informer.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil {

struct TaintBreakerOptions {
  std::string node_name;
  std::string taint_key = "vigil.dev/gpu-problem";
  double max_tainted_share = 0.5;
  std::string gpu_node_selector = "nvidia.com/gpu.present=true";
  // The remediator's ConfigMap.
  std::string breaker_namespace = std::string(kDefaultBreakerNamespace);
  std::string breaker_name = std::string(kBreakerConfigMapName);
  Clock* clock = Clock::Real();
};

// How long a refusal from the check's own count stands before it counts again.
inline constexpr absl::Duration kOwnCountEvery = absl::Minutes(1);

struct TaintBreakerStats {
  std::atomic<uint64_t> decisions_published{0};  // decided by the remediator's breaker
  std::atomic<uint64_t> own_counts{0};           // decided by the fallback's own count
  std::atomic<uint64_t> own_count_lists{0};      // LIST pages those counts cost
  std::atomic<uint64_t> own_count_errors{0};
};

// Which breaker decided.
enum class BreakerSource : uint8_t {
  kRemediator,  // the remediator's published decision
  kOwnCount,    // the fallback: this check counted the GPU nodes itself
};
std::string_view BreakerSourceName(BreakerSource source);  // "remediator", "own-count"

struct TaintDecision {
  bool allowed = false;
  BreakerSource source = BreakerSource::kOwnCount;
  size_t tainted_nodes = 0, gpu_nodes = 0, max_tainted_nodes = 0;
  // With kOwnCount: why the remediator's breaker was not used.
  std::string fallback_why;
};

class TaintBreaker {
 public:
  // `api` (not owned) outlives the breaker.
  TaintBreaker(TaintBreakerOptions options, kube::KubeApi* api);
  ~TaintBreaker();

  void Start();
  void Stop();

  // Whether this node may carry the taint now (it does not yet). Unavailable when the fallback's
  // count could not be made (the API server's answer is in the message): the caller retries.
  absl::StatusOr<TaintDecision> Decide();

  // The remediator's breaker when it is usable now; otherwise why not (in `*why`).
  std::optional<PublishedBreaker> Published(std::string* why) const;
  // {"source", "state", "tainted_nodes", ...} or {"source": "own-count", "why": ...}.
  nlohmann::json StatusJson() const;
  // vigil_healthcheck_kube_breaker_* series.
  std::string Metrics() const;
  const TaintBreakerStats& stats() const { return stats_; }
  const kube::Informer& watch() const { return watch_; }

 private:
  absl::StatusOr<TaintDecision> CountOwn(std::string why);

  const TaintBreakerOptions options_;
  kube::KubeApi* const api_;
  kube::Informer watch_;
  TaintBreakerStats stats_;
  // Decide()'s thread only: the last refusal of the own count, reused until kOwnCountEvery.
  std::optional<TaintDecision> own_refusal_;
  absl::Time own_refusal_at_ = absl::InfinitePast();
};

}  // namespace vigil
