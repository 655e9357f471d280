// The engine's Unix socket, accepted by the engine itself so that the kernel's credentials of
// each client (SO_PEERCRED: uid, gid, pid) are known, then handed to gRPC
// (grpc::AddInsecureChannelFromFd). gRPC 1.51 has no other way to tell a handler who is on the
// other end of a Unix socket; calls on a handed-over connection have peer() == "fd:N", and
// PeerRegistry maps N to the credentials. gRPC closes the fd when the client goes; while any call
// on it runs the fd stays open, so N cannot be reused by another client meanwhile.
//
// Threading: one accept thread, started by Start() and joined by Stop(). PeerRegistry is
// thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server.h"
#include "server/authz.h"

namespace vigil {

class PeerRegistry {
 public:
  void Set(int fd, PeerCredentials credentials);
  std::optional<PeerCredentials> Lookup(int fd) const;

 private:
  mutable absl::Mutex mutex_;
  std::map<int, PeerCredentials> by_fd_ ABSL_GUARDED_BY(mutex_);  // overwritten on fd reuse
};

class UnixListener {
 public:
  // Binds and listens on `path` (prepared by PrepareUnixSocketPath), mode 0666: read-only calls
  // are open to every local user, privileged ones are authorised per call.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path);
  ~UnixListener();

  // Starts accepting and handing connections to `server` (which must be started and outlive
  // Stop()).
  void Start(grpc::Server* server, PeerRegistry* registry);
  // Stops accepting, closes the socket and removes its file. Idempotent.
  void Stop();

 private:
  UnixListener(std::string path, int listen_fd, int wake_read, int wake_write)
      : path_(std::move(path)),
        listen_fd_(listen_fd),
        wake_read_(wake_read),
        wake_write_(wake_write) {}
  void AcceptLoop(grpc::Server* server, PeerRegistry* registry);

  const std::string path_;
  int listen_fd_;
  int wake_read_, wake_write_;  // a pipe that wakes the accept thread for Stop()
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace vigil
