// An operator's injections into a NIC port's fields, applied to what the network source reads:
// the check of one (the port, the field and the change it can take) and the application of the
// active ones to a port's state read and counters read. A port's counters stay monotonic for
// consumers as the GPUs' do (inject/injection.h): while a counter is injected, and after until the
// real counter catches up, it is never published below what was last published. Pure functions
// over values the caller owns: thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "health/source.h"
#include "network/port.h"

namespace vigil::network {

// OK where `injection` (of this port) can apply: `state` (a value 0-5, the number sysfs prints
// before the name), `phys_state` (1-7), `rate` (Gb/s, above 0), or one of the counters the port
// has (a value not below its last published one, or an amount to add). InvalidArgument saying what
// the field takes otherwise.
absl::Status CheckPortInjection(const NicPort& port, const PortFieldInjection& injection);

// After a state read: the injections of this port on state, phys_state and rate replace what was
// read; `port->injected` names them.
void ApplyStateInjections(const std::vector<PortFieldInjection>& injections, NicPort* port);

// After a counters read: the injections of this port on its counters replace or raise what was
// read, never below `*floors` (counter -> last value published while injected; the caller keeps
// it between reads); `port->injected` names the counters published other than read.
void ApplyCounterInjections(const std::vector<PortFieldInjection>& injections, NicPort* port,
                            std::map<std::string, uint64_t>* floors);

}  // namespace vigil::network
