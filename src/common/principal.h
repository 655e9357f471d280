// Who asked the engine for a privileged act (an injection, a clear), as the engine established
// it from the connection — never from what the client says about itself. A plain value type.
#pragma once

#include <cstdint>
#include <string>

namespace vigil {

struct Principal {
  std::string transport;    // "unix", "tcp", "inproc" or "engine" (a scenario's own steps)
  int64_t uid = -1;         // over the Unix socket (SO_PEERCRED); -1 otherwise
  int64_t pid = -1;         // likewise; the pid at connect time
  std::string description;  // for logs and audit records: "uid 0 (root) pid 4242", "token"
};

}  // namespace vigil
