// Implements ReadFile with open/read/close and errno for the reason: one system call per 4 KiB
// and no stream or locale set-up, since the engine reads small sysfs files on every tick.
#include "common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "fmt/format.h"

namespace vigil {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message =
        fmt::format("cannot read {}: {}", Printable(path), std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::InternalError(message);
  }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got > 0) {
      text.append(buffer, static_cast<size_t>(got));
    } else if (got == 0) {
      break;
    } else if (errno != EINTR) {
      const int error = errno;
      close(fd);
      return absl::InternalError(
          fmt::format("cannot read {}: {}", Printable(path), std::strerror(error)));
    }
  }
  close(fd);
  return text;
}

}  // namespace vigil
