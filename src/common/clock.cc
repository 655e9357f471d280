// The real wall clock behind Clock::Real(). Stateless, so safe from any thread.
#include "common/clock.h"

namespace vigil {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace vigil
