// Leader election over a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it: one
// of several replicas holds the Lease and renews it; the others take it over once it has not been
// renewed for its duration. Every write names the resourceVersion it read, so of two replicas that
// race for an expired Lease the API server lets one win (409 Conflict for the other).
//
// Expiry is judged on this replica's own clock from when it last saw the Lease change (not from the
// renewTime written in it), so clocks that disagree between nodes cannot make two leaders.
//
// Not thread-safe: one LeaseLock per replica, driven by one loop (TryAcquireOrRenew every
// `renew_every`). Time from the injected clock.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil::kube {

struct LeaseOptions {
  std::string ns;                               // the Lease's namespace
  std::string name;                             // e.g. "vigil-remediator"
  std::string identity;                         // this replica (its Pod name)
  absl::Duration duration = absl::Seconds(15);  // how long a holder's renewal counts
};

class LeaseLock {
 public:
  // `api` and `clock` are not owned.
  LeaseLock(KubeApi* api, Clock* clock, LeaseOptions options);

  // One round: creates the Lease if there is none, renews it when this replica holds it, takes it
  // over when its holder has not renewed it for `duration`. Returns whether this replica holds it
  // now; an error when the API server could not be asked (then it is not held either: a leader
  // that cannot renew must stop acting before its lease runs out).
  absl::StatusOr<bool> TryAcquireOrRenew();
  // Gives the Lease up (holder cleared) if this replica holds it, so another takes over at once.
  absl::Status Release();

  bool held() const { return held_; }
  // The holder as last seen ("" when none or not read yet).
  const std::string& holder() const { return holder_; }
  int transitions() const { return transitions_; }

 private:
  absl::StatusOr<bool> Write(const std::string& method, const std::string& path,
                             const nlohmann::json& lease);

  KubeApi* const api_;
  Clock* const clock_;
  const LeaseOptions options_;
  bool held_ = false;
  std::string holder_;
  int transitions_ = 0;
  // The record as last seen (holder and renewTime) and when it last changed, on this clock.
  std::string observed_record_;
  absl::Time observed_at_ = absl::InfinitePast();
};

}  // namespace vigil::kube
