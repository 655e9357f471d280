// The remediator's drain step: evicts the workloads that hold a failing node's GPUs through the
// Eviction API (policy/v1), as `kubectl drain` does for a whole node but only for what the GPU
// fault concerns. Which pods: those holding GPUs (nvidia.com/gpu, nvidia.com/mig-*), or every pod
// with `all_pods`; never a DaemonSet's or a mirror (static) pod, nor one in an excluded
// namespace; for a GPU reset only the pods named (those holding the failing GPU). A PDB that
// forbids an eviction now (429) is retried with backoff (1 s doubling to 30 s, at least the
// server's Retry-After) until the timeout; then the drain stops and says which pods are left.
//
// The drain comes in two forms: Drain(), which blocks until done or the timeout, and its parts —
// PlanDrain() then EvictRound() each time NextRoundAfter() says — which the remediator runs one
// round per pass, so that one node's PDB does not hold up the others and the drain's progress can
// be kept on the node (a replica that takes over resumes it, never restarts it).
//
// Threading: Drain() blocks its caller, waiting on the injected clock between attempts; the
// parts never wait.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "kube/kube_api.h"

namespace vigil::remediator {

struct DrainOptions {
  bool all_pods = false;                         // every pod not owned by a DaemonSet
  std::vector<std::string> exclude_namespaces;   // never evicted from
  std::optional<std::vector<std::string>> only;  // "NS/NAME" of the pods to evict (a GPU reset)
  // "NS/NAME" of pods that hold GPUs through DRA ResourceClaims (no nvidia.com/* resource says
  // so): evicted as GPU pods are.
  std::vector<std::string> claim_holders;
  absl::Duration timeout = absl::Minutes(10);
  bool dry_run = false;  // decide and report, evict nothing
};

struct DrainedPod {
  enum class Outcome : uint8_t {
    kPending,     // not tried yet
    kEvicted,     // the API server accepted the eviction
    kGone,        // it was gone already
    kBlocked,     // a PDB still forbade it at the timeout
    kFailed,      // the API server refused otherwise (the detail says how)
    kWouldEvict,  // dry run
  };
  std::string ns, name;
  std::vector<std::string> gpus;  // the GPU resources it holds
  Outcome outcome = Outcome::kPending;
  int attempts = 0;
  std::string detail;
  bool unanswered = false;  // the last attempt got no answer or a server error: tried again
};
std::string_view OutcomeName(DrainedPod::Outcome outcome);  // "evicted", "gone", ...
// The pod is done with: evicted or gone.
bool Drained(const DrainedPod& pod);
// Another eviction round should try it: not tried yet, blocked by a PDB, or unanswered.
bool WantsAnotherTry(const DrainedPod& pod);

struct DrainReport {
  bool complete = false;             // every pod to evict was evicted or gone
  std::vector<DrainedPod> pods;      // those it evicted (or tried to)
  std::vector<std::string> skipped;  // "NS/NAME: why", the pods it leaves by rule
  std::string error;                 // the pods could not be listed ("" otherwise)
};

// Drains `node`. `api` and `clock` are not owned.
DrainReport Drain(kube::KubeApi& api, Clock& clock, const std::string& node,
                  const DrainOptions& options);

// The pods a drain of `node` evicts (all kPending; kWouldEvict with dry_run) and those it leaves
// by rule; `error` when the pods could not be listed.
DrainReport PlanDrain(kube::KubeApi& api, const std::string& node, const DrainOptions& options);
// One eviction round: each pod that WantsAnotherTry() once. Returns whether some still want
// another try; *retry_after: the longest Retry-After a PDB's 429 asked for (zero if none).
bool EvictRound(kube::KubeApi& api, std::vector<DrainedPod>* pods, absl::Duration* retry_after);
// When round `rounds` + 1 is due after round `rounds` (1-based) ended at `now`: 1 s doubling to
// 30 s, and at least the server's Retry-After.
absl::Time NextRoundAfter(absl::Time now, int rounds, absl::Duration retry_after);

}  // namespace vigil::remediator
