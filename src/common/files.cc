// Implements ReadFile with iostreams and errno for the reason.
#include "common/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fmt/format.h"

namespace vigil {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    const int error = errno;
    const std::string message = fmt::format("cannot read {}: {}", path, std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::InternalError(message);
  }
  std::stringstream text;
  text << file.rdbuf();
  if (file.bad()) return absl::InternalError(fmt::format("cannot read {}: I/O error", path));
  return text.str();
}

}  // namespace vigil
