// The node name every daemon command defaults to and validates.
#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include "cli/commands.h"
#include "fmt/format.h"

namespace vigil::cli {

std::string EnvOrHostName(const char* variable) {
  if (const char* value = std::getenv(variable); value != nullptr && *value != '\0') return value;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') return host;
  return "";
}

std::string DefaultNodeName() { return EnvOrHostName("NODE_NAME"); }

// Kubernetes node names are DNS subdomains; accept those (and underscores, seen on bare metal).
absl::Status CheckNodeName(const std::string& name) {
  if (name.empty() || name.size() > 253) {
    return absl::InvalidArgumentError(
        "--node-name is empty: set it, or NODE_NAME (from the downward API on Kubernetes)");
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return absl::InvalidArgumentError(fmt::format(
          "--node-name '{}' has '{}': use letters, digits, '-', '.' and '_' only", name, c));
    }
  }
  return absl::OkStatus();
}

}  // namespace vigil::cli
