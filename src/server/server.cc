// Implements EngineServer and its start-up checks.
#include "server/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/strings.h"
#include "fmt/format.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::Status CheckTcpAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "--listen '{}' is not HOST:PORT (e.g. 127.0.0.1:5555, 0.0.0.0:5555, [::1]:5555)", address));
  }
  std::string host = address.substr(0, colon);
  const std::optional<uint64_t> port = ParseUint64(address.substr(colon + 1));
  if (!port || *port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("--listen '{}': the port must be a number from 0 to 65535", address));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* resolved = nullptr;
  if (int error = getaddrinfo(host.c_str(), nullptr, &hints, &resolved); error != 0) {
    return absl::InvalidArgumentError(
        fmt::format("--listen '{}': cannot resolve '{}': {}", address, host, gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> cleanup(resolved, freeaddrinfo);
  if (*port == 0) return absl::OkStatus();
  // Bind once ourselves so "in use" is reported plainly rather than as a gRPC failure.
  FdCloser fd(socket(resolved->ai_family, SOCK_STREAM, 0));
  if (fd.get() < 0) return absl::InternalError(fmt::format("socket(): {}", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (resolved->ai_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(resolved->ai_addr)->sin_port = htons(*port);
  } else if (resolved->ai_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(resolved->ai_addr)->sin6_port = htons(*port);
  }
  if (bind(fd.get(), resolved->ai_addr, resolved->ai_addrlen) != 0) {
    const int error = errno;
    if (error == EADDRINUSE) {
      return absl::AlreadyExistsError(
          fmt::format("cannot listen on {}: the port is already in use (another vigil engine or "
                      "nv-hostengine?): stop it or choose another port with --listen",
                      address));
    }
    return absl::PermissionDeniedError(
        fmt::format("cannot listen on {}: {}", address, std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status PrepareUnixSocketPath(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("--socket '{}': a Unix socket path must be 1 to {} bytes long", path,
                    sizeof(address.sun_path) - 1));
  }
  const std::filesystem::path directory = std::filesystem::path(path).parent_path().empty()
                                              ? "."
                                              : std::filesystem::path(path).parent_path();
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::PermissionDeniedError(fmt::format(
        "cannot create {} for the socket: {}: run as a user who can, or choose another --socket",
        directory.string(), error.message()));
  }
  if (access(directory.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(fmt::format(
        "cannot create the socket in {}: {}: run as a user who can, or choose another --socket",
        directory.string(), std::strerror(errno)));
  }
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) return absl::OkStatus();  // nothing there: good
  if (!S_ISSOCK(info.st_mode)) {
    return absl::AlreadyExistsError(
        fmt::format("{} exists and is not a socket: remove it or choose another --socket", path));
  }
  // A socket file: live (another engine) or stale (left by a crash)?
  FdCloser fd(socket(AF_UNIX, SOCK_STREAM, 0));
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    return absl::AlreadyExistsError(fmt::format(
        "another engine is already listening on {}: stop it, or choose another --socket", path));
  }
  if (unlink(path.c_str()) != 0) {
    return absl::PermissionDeniedError(
        fmt::format("cannot remove the stale socket file {}: {}", path, std::strerror(errno)));
  }
  spdlog::info("replaced the stale socket file {} left by an earlier engine", path);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EngineServer>> EngineServer::Start(Engine* engine,
                                                                  const ServerOptions& options) {
  if (!options.tcp_address.empty()) {
    if (absl::Status status = CheckTcpAddress(options.tcp_address); !status.ok()) return status;
  }
  if (!options.unix_socket_path.empty()) {
    if (absl::Status status = PrepareUnixSocketPath(options.unix_socket_path); !status.ok()) {
      return status;
    }
  }
  // The TLS files are checked before anything listens: a bad one is the start's error.
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials = grpc::InsecureServerCredentials();
  if (!options.tcp_address.empty() && options.tls.enabled()) {
    // Certificates are valid in real time, whatever clock the engine runs on.
    auto secure = tls::MakeServerCredentials(options.tls, absl::Now());
    if (!secure.ok()) return secure.status();
    tcp_credentials = *std::move(secure);
  }
  std::unique_ptr<EngineServer> server(new EngineServer(engine, options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Without this, port 0 can also open a second stray port (shared notes/build.md).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients keep idle subscriptions alive with pings; allow them (and answer them) so a dead
  // engine or client is noticed within seconds, not at the next TCP timeout.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 4'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  if (!options.unix_socket_path.empty()) {
    // Accepted by the engine itself, to know each client's uid (see unix_listener.h).
    auto listener = UnixListener::Listen(options.unix_socket_path);
    if (!listener.ok()) return listener.status();
    server->unix_listener_ = std::move(*listener);
  }
  if (!options.tcp_address.empty()) {
    builder.AddListeningPort(options.tcp_address, tcp_credentials, &server->tcp_port_);
  }
  builder.RegisterService(&server->service_);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        fmt::format("the gRPC server could not start on {}{}{}: see the log lines above",
                    options.unix_socket_path,
                    options.unix_socket_path.empty() || options.tcp_address.empty() ? "" : " and ",
                    options.tcp_address));
  }
  if (server->unix_listener_ != nullptr) {
    server->unix_listener_->Start(server->server_.get(), &server->peers_);
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  server->server_->GetHealthCheckService()->SetServingStatus(
      std::string(v1::Engine::service_full_name()), true);
  return server;
}

EngineServer::~EngineServer() { Shutdown(absl::Seconds(2)); }

std::shared_ptr<grpc::Channel> EngineServer::InProcessChannel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void EngineServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (unix_listener_ != nullptr) unix_listener_->Stop();  // no new clients; removes the file
  if (server_ == nullptr) return;                         // Start() failed before it began
  server_->GetHealthCheckService()->SetServingStatus(false);
  const absl::Status stopping = absl::UnavailableError("the engine is shutting down");
  engine_->StopStreams(stopping);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace vigil
