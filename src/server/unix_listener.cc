// Implements UnixListener and PeerRegistry.
#include "server/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/thread.h"
#include "fmt/format.h"
#include "grpcpp/server_posix.h"
#include "spdlog/spdlog.h"

namespace vigil {

void PeerRegistry::Set(int fd, PeerCredentials credentials) {
  absl::MutexLock lock(&mutex_);
  by_fd_[fd] = credentials;
}

std::optional<PeerCredentials> PeerRegistry::Lookup(int fd) const {
  absl::MutexLock lock(&mutex_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(fmt::format("socket(): {}", std::strerror(errno)));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      chmod(path.c_str(), 0666) != 0 || listen(fd, 128) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::PermissionDeniedError(
        fmt::format("cannot listen on {}: {}: choose another --socket", path, error));
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError(fmt::format("pipe(): {}", std::strerror(errno)));
  }
  return std::unique_ptr<UnixListener>(new UnixListener(path, fd, wake[0], wake[1]));
}

UnixListener::~UnixListener() {
  Stop();
  close(wake_read_);
  close(wake_write_);
}

void UnixListener::Start(grpc::Server* server, PeerRegistry* registry) {
  thread_ =
      StartNamedThread("vigil-accept", [this, server, registry] { AcceptLoop(server, registry); });
}

void UnixListener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  const char byte = 0;
  if (write(wake_write_, &byte, 1) < 0) spdlog::error("cannot wake the accept thread");
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  unlink(path_.c_str());
}

void UnixListener::AcceptLoop(grpc::Server* server, PeerRegistry* registry) {
  bool warned_fd_limit = false;
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("poll() on {}: {}; no new connections will be accepted", path_,
                    std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;  // Stop()
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        // Out of file descriptors: say so once, and wait instead of spinning on poll().
        if (!warned_fd_limit) {
          spdlog::error("cannot accept on {}: {}; raise the fd limit (ulimit -n)", path_,
                        std::strerror(errno));
          warned_fd_limit = true;
        }
        poll(fds + 1, 1, 100);
      }
      continue;  // EAGAIN, EINTR, ECONNABORTED: the client gave up; nothing to do
    }
    warned_fd_limit = false;
    ucred credentials{};
    socklen_t length = sizeof(credentials);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
      spdlog::warn("cannot read the peer credentials of a client on {}: {}; closing it", path_,
                   std::strerror(errno));
      close(fd);
      continue;
    }
    registry->Set(fd, {credentials.uid, credentials.gid, credentials.pid});
    grpc::AddInsecureChannelFromFd(server, fd);  // gRPC owns and closes the fd from here
  }
}

}  // namespace vigil
