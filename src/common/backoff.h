// Exponential backoff with jitter for retry loops (reconnecting to the engine, the Kubernetes
// API): by default 100 ms, doubling to a 5 s cap, each delay randomised by +-20% so a fleet of
// clients does not retry in lock-step after an engine restart or an API outage.
// Not thread-safe: one per retry loop.
#pragma once

#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace vigil {

struct BackoffPolicy {
  absl::Duration initial = absl::Milliseconds(100);
  absl::Duration max = absl::Seconds(5);
  double multiplier = 2.0;
  double jitter = 0.2;  // fraction of the delay, either way
};

class Backoff {
 public:
  using Policy = BackoffPolicy;
  Backoff() : Backoff(Policy(), std::random_device()()) {}
  explicit Backoff(Policy policy) : Backoff(policy, std::random_device()()) {}
  Backoff(Policy policy, uint64_t seed) : policy_(policy), rng_(seed), current_(policy.initial) {}

  // The next delay to wait; grows until Reset().
  absl::Duration Next();
  // After a success: start again from the initial delay.
  void Reset() { current_ = policy_.initial; }

 private:
  Policy policy_;
  std::mt19937_64 rng_;
  absl::Duration current_;
};

}  // namespace vigil
