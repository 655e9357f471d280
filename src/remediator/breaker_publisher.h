// Publishes the tainted-share circuit breaker for the health checks (api/circuit_breaker.h): the
// remediator counts the GPU nodes and their taints from its watch of the fleet, and writes the
// decision to one ConfigMap that every health check watches — when the breaker opens or closes,
// and every kBreakerRenewEvery while it does not, so a check can tell a live decision from one
// left behind. A check's API cost then does not grow with the fleet: it watches one small object
// written a few times an hour instead of every GPU node. Writes are a PUT naming the
// resourceVersion last read (a replica that lost its Lease is refused with 409, then reads
// again); the first write of a replica reads the object (GET), creating it (POST) when there is
// none.
// Thread-safety: Publish() from one thread at a time (the remediator's pass); state() and stats()
// from any thread.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "api/circuit_breaker.h"
#include "common/clock.h"
#include "kube/kube_api.h"

namespace vigil::remediator {

struct BreakerPublisherOptions {
  std::string ns = std::string(kDefaultBreakerNamespace);
  std::string name = std::string(kBreakerConfigMapName);
  std::string taint_key = "vigil.dev/gpu-problem";
  double max_tainted_share = 0.5;
  std::string identity = "vigil-remediator";  // decidedBy
};

// What the breaker is decided on: GPU nodes carrying the taint of all GPU nodes, and GPUs out of
// service (a tainted node's every GPU, each GPU a DeviceTaintRule quarantines) of the GPUs the
// nodes say they have.
struct BreakerCounts {
  size_t tainted_nodes = 0, gpu_nodes = 0;
  size_t out_of_service_gpus = 0, gpus = 0;
};

struct BreakerPublisherStats {
  std::atomic<uint64_t> writes{0};  // creates and updates
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> open{false};       // the published state
  std::atomic<bool> published{false};  // a write has succeeded since the start
};

class BreakerPublisher {
 public:
  // `api` (not owned) outlives the publisher.
  BreakerPublisher(BreakerPublisherOptions options, kube::KubeApi* api);

  // Publishes the decision `counts` give at `now` when it differs from the one published, or the
  // renewal is due; otherwise makes no request. An error (logged by the caller) leaves it for the
  // next call.
  absl::Status Publish(const BreakerCounts& counts, absl::Time now);
  // What this replica knew of the object may be stale (another replica held the Lease and wrote
  // it meanwhile): the next Publish() reads it again before deciding whether to write.
  void Forget() { read_ = false; }
  const BreakerPublisherStats& stats() const { return stats_; }
  const BreakerPublisherOptions& options() const { return options_; }

 private:
  // Reads the object (its resourceVersion and what it says); none is not an error.
  absl::Status Read();
  std::string Path(bool collection) const;

  const BreakerPublisherOptions options_;
  kube::KubeApi* const api_;
  BreakerPublisherStats stats_;
  // Owned by Publish()'s thread: what the object says and its version, once read or written.
  bool read_ = false;
  std::optional<PublishedBreaker> published_;
  std::string resource_version_;
};

}  // namespace vigil::remediator
