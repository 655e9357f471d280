// Implements the condition message's prefix, written by the health check and read by the drill.
#include "api/node_condition.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "fmt/format.h"

namespace vigil {

size_t MaxTaintedNodes(double max_tainted_share, size_t gpu_nodes) {
  return std::max<size_t>(
      1, static_cast<size_t>(std::floor(max_tainted_share * static_cast<double>(gpu_nodes))));
}

std::string ConditionPrefix(std::string_view instance_id, uint64_t seq) {
  return fmt::format("engine {} seq {}: ", instance_id, seq);
}

bool ParseConditionPrefix(std::string_view message, std::string* instance_id, uint64_t* seq) {
  if (!message.starts_with("engine ")) return false;
  message.remove_prefix(7);
  const size_t space = message.find(' ');
  if (space == std::string_view::npos || !message.substr(space).starts_with(" seq ")) return false;
  const std::string_view number = message.substr(space + 5);
  uint64_t parsed = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), parsed);
  if (error != std::errc() || end == number.data() || end == number.data() + number.size() ||
      *end != ':') {
    return false;
  }
  *instance_id = std::string(message.substr(0, space));
  *seq = parsed;
  return true;
}

}  // namespace vigil
