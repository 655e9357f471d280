// Implements the check and the application of NIC port field injections.
#include "network/port_injection.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "fmt/format.h"

namespace vigil::network {
namespace {

bool IsStateField(const std::string& field) {
  return field == "state" || field == "phys_state" || field == "rate";
}

bool IsInteger(double value, double low, double high) {
  return std::isfinite(value) && value == std::trunc(value) && value >= low && value <= high;
}

// The port's injections, in the order given (one per field: the table supersedes).
std::vector<const PortFieldInjection*> Of(const std::vector<PortFieldInjection>& injections,
                                          const NicPort& port) {
  std::vector<const PortFieldInjection*> mine;
  const std::string name = port.Name();
  for (const PortFieldInjection& injection : injections) {
    if (injection.port == name) mine.push_back(&injection);
  }
  return mine;
}

void Mark(NicPort* port, const std::string& field) {
  auto at = std::lower_bound(port->injected.begin(), port->injected.end(), field);
  if (at == port->injected.end() || *at != field) port->injected.insert(at, field);
}

}  // namespace

absl::Status CheckPortInjection(const NicPort& port, const PortFieldInjection& injection) {
  const std::string& field = injection.field;
  if (IsStateField(field)) {
    if (!injection.value.has_value()) {
      return absl::InvalidArgumentError(
          fmt::format("{} is not a counter: give a value (--add applies to counters only)", field));
    }
    const double value = *injection.value;
    if (field == "state" && !IsInteger(value, 0, 5)) {
      return absl::InvalidArgumentError(fmt::format(
          "state takes the number sysfs prints before the name: 0 NOP, 1 DOWN, 2 INIT, 3 ARMED, "
          "4 ACTIVE, 5 ACTIVE_DEFER; not {}",
          value));
    }
    if (field == "phys_state" && !IsInteger(value, 1, 7)) {
      return absl::InvalidArgumentError(fmt::format(
          "phys_state takes the number sysfs prints before the name: 1 Sleep, 2 Polling, 3 "
          "Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test; not "
          "{}",
          value));
    }
    if (field == "rate" && !(std::isfinite(value) && value > 0)) {
      return absl::InvalidArgumentError(
          fmt::format("rate takes the data rate in Gb/s, above 0 (e.g. 200); not {}", value));
    }
    return absl::OkStatus();
  }
  auto counter = port.counters.find(field);
  if (counter == port.counters.end()) {
    std::string names;
    for (const auto& [name, value] : port.counters) names += (names.empty() ? "" : ", ") + name;
    return absl::InvalidArgumentError(fmt::format(
        "port {} has no field {}: inject state, phys_state, rate or one of its counters ({})",
        port.Name(), field, names.empty() ? "none read yet" : names));
  }
  if (injection.add.has_value()) {
    if (*injection.add <= 0) {
      return absl::InvalidArgumentError("--add needs a positive amount: counters only grow");
    }
    return absl::OkStatus();
  }
  if (!injection.value.has_value() || !IsInteger(*injection.value, 0, 1.8e19)) {
    return absl::InvalidArgumentError(
        fmt::format("{} is a counter: give a whole number, or an amount to add", field));
  }
  if (*injection.value < static_cast<double>(counter->second)) {
    return absl::InvalidArgumentError(fmt::format(
        "{} of port {} is a counter at {}: a lower value would make it go backwards; use --add "
        "to raise it",
        field, port.Name(), counter->second));
  }
  return absl::OkStatus();
}

void ApplyStateInjections(const std::vector<PortFieldInjection>& injections, NicPort* port) {
  std::erase_if(port->injected, IsStateField);
  for (const PortFieldInjection* injection : Of(injections, *port)) {
    if (!IsStateField(injection->field) || !injection->value.has_value()) continue;
    const double value = *injection->value;
    if (injection->field == "state") {
      port->state = static_cast<PortState>(static_cast<uint8_t>(value));
    } else if (injection->field == "phys_state") {
      port->phys_state = static_cast<PhysState>(static_cast<uint8_t>(value));
    } else {
      // The width and lane speed that make an injected rate are not known: the rate alone.
      port->rate = PortRate{.gbps = value};
    }
    Mark(port, injection->field);
  }
}

void ApplyCounterInjections(const std::vector<PortFieldInjection>& injections, NicPort* port,
                            std::map<std::string, uint64_t>* floors) {
  std::erase_if(port->injected, [](const std::string& field) { return !IsStateField(field); });
  std::map<std::string, const PortFieldInjection*> active;
  for (const PortFieldInjection* injection : Of(injections, *port)) {
    if (!IsStateField(injection->field)) active[injection->field] = injection;
  }
  std::set<std::string> names;
  for (const auto& [name, injection] : active) names.insert(name);
  for (const auto& [name, floor] : *floors) names.insert(name);
  for (const std::string& name : names) {
    auto read = port->counters.find(name);
    std::optional<uint64_t> real;
    if (read != port->counters.end()) real = read->second;
    std::optional<uint64_t> candidate = real;
    auto injection = active.find(name);
    if (injection != active.end()) {
      if (injection->second->value.has_value()) {
        candidate = static_cast<uint64_t>(*injection->second->value);
      } else if (real.has_value()) {  // add: follows the real counter; nothing to add to without
        candidate = *real + static_cast<uint64_t>(*injection->second->add);
      }
    }
    if (!candidate.has_value()) continue;  // unread and not replaced: unknown, as read
    auto floor = floors->find(name);
    if (floor != floors->end() && *candidate < floor->second) candidate = floor->second;
    if (injection != active.end()) {
      (*floors)[name] = *candidate;
    } else if (floor != floors->end() && real.has_value() && *real >= floor->second) {
      floors->erase(floor);  // the real counter is at or past every value published while injected
    }
    port->counters[name] = *candidate;
    if (candidate != real || injection != active.end()) Mark(port, name);
  }
}

}  // namespace vigil::network
