// Polling for tests, with a deadline: for state in other processes and in threads the test
// cannot be told of (a writer thread's progress, a loop waiting on a fake clock). Thread-safe.
#pragma once

#include <functional>

#include "absl/time/time.h"

namespace vigil::testing {

// Polls `condition` every `poll` until it holds (true) or `timeout` passes (false; it is checked
// once more at the end).
bool Eventually(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(15),
                absl::Duration poll = absl::Milliseconds(100));

}  // namespace vigil::testing
