// Captures what the default spdlog logger logs while it lives, so a test can assert that a line
// was said, and said once. Replaces the default logger for its lifetime and restores it after.
// Thread-safe (spdlog's sink mutex); one capture at a time.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "spdlog/spdlog.h"

namespace vigil::testing {

class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The messages logged so far (the payload, without time or level).
  std::vector<std::string> Lines() const;
  // How many messages contain `text`.
  size_t Count(std::string_view text) const;

 private:
  struct Shared {
    mutable std::mutex mutex;
    std::vector<std::string> lines;
  };
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace vigil::testing
