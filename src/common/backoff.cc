// Implements Backoff.
#include "common/backoff.h"

#include <algorithm>

namespace vigil {

absl::Duration Backoff::Next() {
  const absl::Duration base = current_;
  current_ = std::min(policy_.max, current_ * policy_.multiplier);
  const double factor =
      std::uniform_real_distribution<double>(1 - policy_.jitter, 1 + policy_.jitter)(rng_);
  return base * factor;
}

}  // namespace vigil
