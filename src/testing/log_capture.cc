// Implements the log capture: a sink that keeps each message's payload.
#include "testing/log_capture.h"

#include <algorithm>

#include "spdlog/sinks/base_sink.h"

namespace vigil::testing {
namespace {

template <typename Shared>
class KeepingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit KeepingSink(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->lines.emplace_back(message.payload.data(), message.payload.size());
  }
  void flush_() override {}

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace

LogCapture::LogCapture()
    : shared_(std::make_shared<Shared>()), previous_(spdlog::default_logger()) {
  auto logger =
      std::make_shared<spdlog::logger>("capture", std::make_shared<KeepingSink<Shared>>(shared_));
  logger->set_level(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
}

LogCapture::~LogCapture() { spdlog::set_default_logger(previous_); }

std::vector<std::string> LogCapture::Lines() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->lines;
}

size_t LogCapture::Count(std::string_view text) const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return static_cast<size_t>(
      std::count_if(shared_->lines.begin(), shared_->lines.end(),
                    [&](const std::string& line) { return line.find(text) != std::string::npos; }));
}

}  // namespace vigil::testing
