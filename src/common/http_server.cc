// Implements the epoll HTTP server.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "absl/time/clock.h"
#include "common/gzip.h"
#include "common/strings.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

constexpr size_t kMaxRequestBytes = 16 * 1024;
constexpr size_t kMaxConnections = 1024;
constexpr absl::Duration kIdleTimeout = absl::Seconds(60);
// A TLS record's worth: what one SSL_write is given at most.
constexpr size_t kTlsChunk = 16 * 1024;

// "10.0.0.3:51514", for log lines about a connection.
std::string PeerOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "unknown";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return fmt::format("[{}]:{}", host, port);
  }
  const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
  inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
  port = ntohs(in->sin_port);
  return fmt::format("{}:{}", host, port);
}

std::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

struct HttpServer::Connection {
  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
  }
  int fd = -1;
  // TLS: the session (nullptr for plain HTTP) and the context it was made from.
  SSL* ssl = nullptr;
  std::shared_ptr<SSL_CTX> tls_context;
  bool read_wants_write = false;  // SSL_read (a handshake) waits for the socket to take output
  std::string file_chunk;         // TLS: the bytes of a shared file being written
  size_t file_chunk_offset = 0;   // ... from this offset of it
  std::string input;
  // Pending output, in order: owned strings, shared bodies and shared files, each with a write
  // offset.
  struct Piece {
    std::string owned;
    std::shared_ptr<const std::string> shared;
    std::shared_ptr<const SharedFile> file;
    size_t offset = 0;
    std::string_view view() const {
      return shared != nullptr ? std::string_view(*shared) : std::string_view(owned);
    }
    size_t size() const { return file != nullptr ? file->size() : view().size(); }
  };
  std::deque<Piece> output;
  bool close_after_write = false;
  bool watching_writable = false;  // EPOLLOUT registered
  absl::Time last_active;
};

absl::StatusOr<std::shared_ptr<const SharedFile>> SharedFile::Create(std::string_view data) {
  const int fd = memfd_create("vigil-body", MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(fmt::format("memfd_create: {}", strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? strerror(errno) : "wrote nothing";
      close(fd);
      return absl::InternalError(fmt::format("writing a memory file: {}", why));
    }
    done += static_cast<size_t>(n);
  }
  return std::shared_ptr<const SharedFile>(new SharedFile(fd, data.size()));
}

SharedFile::~SharedFile() { close(fd_); }

HttpServer::HttpServer() = default;
HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(const std::string& path, Handler handler) {
  handlers_[path] = [handler = std::move(handler)](const HttpRequest&) { return handler(); };
}

void HttpServer::Get(const std::string& path, RequestHandler handler) {
  handlers_[path] = std::move(handler);
}

absl::Status HttpServer::Start(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format(
        "--listen '{}' is not [HOST]:PORT (e.g. :9400, 127.0.0.1:9400, [::1]:9400)", address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::optional<uint64_t> port = ParseUint64(address.substr(colon + 1));
  if (!port || *port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("--listen '{}': the port must be a number from 0 to 65535", address));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* resolved = nullptr;
  const std::string service = std::to_string(*port);
  if (const int error =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &resolved);
      error != 0) {
    return absl::InvalidArgumentError(
        fmt::format("--listen '{}': cannot resolve '{}': {}", address, host, gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> cleanup(resolved, freeaddrinfo);
  listen_fd_ = socket(resolved->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (listen_fd_ < 0 || bind(listen_fd_, resolved->ai_addr, resolved->ai_addrlen) != 0 ||
      listen(listen_fd_, 128) != 0) {
    const std::string error = std::strerror(errno);
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
    return absl::AlreadyExistsError(
        fmt::format("cannot listen on {}: {}: stop the other process or choose another --listen",
                    address, error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event);
  event.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
  thread_ = StartNamedThread("vigil-http", [this] { Loop(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) spdlog::error("cannot wake the HTTP server");
  thread_.join();
  for (auto& [fd, connection] : connections_) close(fd);
  connections_.clear();
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
}

void HttpServer::Loop() {
  epoll_event events[64];
  absl::Time last_sweep = absl::Now();
  while (true) {
    const int count = epoll_wait(epoll_fd_, events, 64, 1000);
    if (count < 0 && errno != EINTR) {
      spdlog::error("HTTP server: epoll_wait: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < count; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) return;
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      Connection& connection = *it->second;
      bool keep = true;
      if (events[i].events & (EPOLLERR | EPOLLHUP)) keep = false;
      if (keep && (events[i].events & EPOLLIN)) keep = OnReadable(connection);
      if (keep && (events[i].events & EPOLLOUT)) {
        keep = connection.read_wants_write ? OnReadable(connection) : Flush(connection);
      }
      if (!keep) Close(fd);
    }
    const absl::Time now = absl::Now();
    if (now - last_sweep > absl::Seconds(1)) {
      last_sweep = now;
      std::vector<int> idle;
      for (const auto& [fd, connection] : connections_) {
        if (now - connection->last_active > kIdleTimeout) idle.push_back(fd);
      }
      for (int fd : idle) Close(fd);
    }
  }
}

void HttpServer::Accept() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: done; EMFILE and the like: try again on the next event
    if (connections_.size() >= kMaxConnections) {
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->last_active = absl::Now();
    if (guard_ != nullptr) connection->tls_context = guard_->TlsContext();
    if (connection->tls_context != nullptr) {
      connection->ssl = SSL_new(connection->tls_context.get());
      if (connection->ssl == nullptr) {
        spdlog::warn("HTTP server: cannot start TLS on a connection: {}",
                     ERR_error_string(ERR_get_error(), nullptr));
        close(fd);
        continue;
      }
      SSL_set_fd(connection->ssl, fd);
      SSL_set_accept_state(connection->ssl);
      SSL_set_mode(connection->ssl,
                   SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    }
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
    connections_[fd] = std::move(connection);
  }
}

void HttpServer::Close(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  connections_.erase(fd);
}

std::optional<HttpRequestHead> ParseRequestHead(std::string_view head) {
  const std::vector<std::string_view> lines = Split(head, '\n');
  const std::vector<std::string_view> parts = Split(Trim(lines[0]), ' ');
  if (parts.size() != 3 || !parts[2].starts_with("HTTP/1.")) return std::nullopt;
  HttpRequestHead parsed{.method = std::string(parts[0]), .keep_alive = parts[2] == "HTTP/1.1"};
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = Trim(lines[i].substr(0, colon));
    const std::string_view value = Trim(lines[i].substr(colon + 1));
    if (EqualsIgnoreCase(name, "connection")) {
      if (EqualsIgnoreCase(value, "close")) parsed.keep_alive = false;
      if (EqualsIgnoreCase(value, "keep-alive")) parsed.keep_alive = true;
    } else if (EqualsIgnoreCase(name, "authorization")) {
      parsed.request.authorization = std::string(value);
    } else if (EqualsIgnoreCase(name, "accept-encoding")) {
      parsed.request.accepts_gzip = AcceptsGzip(value);
    } else if ((EqualsIgnoreCase(name, "content-length") && value != "0") ||
               EqualsIgnoreCase(name, "transfer-encoding")) {
      parsed.has_body = true;
    }
  }
  parsed.request.path = std::string(parts[1]);
  if (const size_t query = parsed.request.path.find('?'); query != std::string::npos) {
    parsed.request.path.resize(query);
  }
  return parsed;
}

ssize_t HttpServer::Receive(Connection& connection, char* buffer, size_t size) {
  if (connection.ssl == nullptr) return read(connection.fd, buffer, size);
  ERR_clear_error();
  const int n = SSL_read(connection.ssl, buffer, static_cast<int>(size));
  if (n > 0) return n;
  const int error = SSL_get_error(connection.ssl, n);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
    connection.read_wants_write = error == SSL_ERROR_WANT_WRITE;
    errno = EAGAIN;
    return -1;
  }
  if (error == SSL_ERROR_ZERO_RETURN) return 0;
  if (error == SSL_ERROR_SSL && !SSL_is_init_finished(connection.ssl)) {
    // A refused handshake: a client without the certificate asked for, a wrong CA, plain HTTP.
    spdlog::warn("TLS handshake from {} failed: {}", PeerOf(connection.fd),
                 ERR_reason_error_string(ERR_peek_last_error()) != nullptr
                     ? ERR_reason_error_string(ERR_peek_last_error())
                     : "no detail");
  }
  ERR_clear_error();
  errno = ECONNRESET;
  return -1;
}

bool HttpServer::OnReadable(Connection& connection) {
  char buffer[8192];
  connection.read_wants_write = false;
  while (true) {
    const ssize_t n = Receive(connection, buffer, sizeof(buffer));
    if (n == 0) return false;  // the client closed
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    connection.input.append(buffer, static_cast<size_t>(n));
    // A short read drained the socket: skip the read that would only say EAGAIN. (Not over TLS:
    // a record may be buffered in the session, where epoll cannot see it.)
    if (connection.ssl == nullptr && static_cast<size_t>(n) < sizeof(buffer)) break;
    if (connection.input.size() > kMaxRequestBytes + sizeof(buffer)) break;
  }
  connection.last_active = absl::Now();
  // Answer every complete request (pipelined ones too), in order.
  while (true) {
    const size_t end = connection.input.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (connection.input.size() > kMaxRequestBytes) {
        connection.close_after_write = true;
        Send(connection, {.status = 431, .body = "request headers too large\n"}, false, false);
      }
      break;
    }
    const std::optional<HttpRequestHead> head =
        ParseRequestHead(std::string_view(connection.input).substr(0, end));
    connection.input.erase(0, end + 4);
    if (!head.has_value()) {
      connection.close_after_write = true;
      Send(connection, {.status = 400, .body = "bad request\n"}, false, false);
      break;
    }
    if (head->has_body) {  // nothing here takes a body; refuse rather than mis-frame the next one
      connection.close_after_write = true;
      Send(connection, {.status = 400, .body = "bad request: no request here takes a body\n"},
           false, false);
      break;
    }
    const bool keep_alive = head->keep_alive;
    Send(connection, Route(head->method, head->request), keep_alive, head->method == "HEAD");
    if (!keep_alive) {
      connection.close_after_write = true;
      break;
    }
  }
  return Flush(connection);
}

HttpResponse HttpServer::Route(std::string_view method, const HttpRequest& request) const {
  if (method != "GET" && method != "HEAD") {
    return {.status = 405, .body = "only GET and HEAD are served here\n"};
  }
  if (guard_ != nullptr) {
    if (std::optional<HttpResponse> refused = guard_->Check(request)) return *std::move(refused);
  }
  if (auto handler = handlers_.find(request.path); handler != handlers_.end()) {
    return handler->second(request);
  }
  return {.status = 404, .body = "not found\n"};
}

void HttpServer::Send(Connection& connection, HttpResponse response, bool keep_alive,
                      bool head_only) {
  const size_t length = (response.shared_prefix != nullptr ? response.shared_prefix->size() : 0) +
                        (response.file_body != nullptr ? response.file_body->size() : 0) +
                        (response.shared_body != nullptr ? response.shared_body->size() : 0) +
                        response.body.size();
  Connection::Piece head;
  head.owned = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{}{}{}{}Content-Length: {}\r\nConnection: "
      "{}\r\n\r\n",
      response.status, Reason(response.status), response.content_type,
      guard_ != nullptr ? guard_->ExtraHeaders() : "", response.extra_headers,
      response.content_encoding.empty() ? ""
                                        : "Content-Encoding: " + response.content_encoding + "\r\n",
      response.vary_accept_encoding ? "Vary: Accept-Encoding\r\n" : "", length,
      keep_alive ? "keep-alive" : "close");
  connection.output.push_back(std::move(head));
  if (head_only) return;
  if (response.shared_prefix != nullptr && !response.shared_prefix->empty()) {
    connection.output.push_back({.shared = std::move(response.shared_prefix)});
  }
  if (response.file_body != nullptr && response.file_body->size() > 0) {
    connection.output.push_back({.file = std::move(response.file_body)});
  }
  if (response.shared_body != nullptr && !response.shared_body->empty()) {
    connection.output.push_back({.shared = std::move(response.shared_body)});
  }
  if (!response.body.empty()) connection.output.push_back({.owned = std::move(response.body)});
}

bool HttpServer::FlushTls(Connection& connection) {
  while (!connection.output.empty()) {
    Connection::Piece& front = connection.output.front();
    std::string_view data;
    if (front.file != nullptr) {
      // A retry after WANT_WRITE must offer the same bytes: the chunk is kept until written.
      if (connection.file_chunk.empty() || connection.file_chunk_offset != front.offset) {
        connection.file_chunk.resize(std::min(kTlsChunk, front.file->size() - front.offset));
        const ssize_t got = pread(front.file->fd(), connection.file_chunk.data(),
                                  connection.file_chunk.size(), static_cast<off_t>(front.offset));
        if (got <= 0) return false;
        connection.file_chunk.resize(static_cast<size_t>(got));
        connection.file_chunk_offset = front.offset;
      }
      data = connection.file_chunk;
    } else {
      data = front.view().substr(front.offset, kTlsChunk);
    }
    ERR_clear_error();
    const int written = SSL_write(connection.ssl, data.data(), static_cast<int>(data.size()));
    if (written <= 0) {
      const int error = SSL_get_error(connection.ssl, written);
      ERR_clear_error();
      if (error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ) break;
      return false;
    }
    front.offset += static_cast<size_t>(written);
    if (front.file != nullptr) connection.file_chunk.clear();
    if (front.offset >= front.size()) connection.output.pop_front();
  }
  WatchWritable(connection);
  return !(connection.output.empty() && connection.close_after_write);
}

void HttpServer::WatchWritable(Connection& connection) {
  const bool want = !connection.output.empty() || connection.read_wants_write;
  if (connection.watching_writable == want) return;
  connection.watching_writable = want;
  epoll_event event{};
  event.events = want ? uint32_t{EPOLLIN | EPOLLOUT} : uint32_t{EPOLLIN};
  event.data.fd = connection.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection.fd, &event);
}

bool HttpServer::Flush(Connection& connection) {
  if (connection.ssl != nullptr) return FlushTls(connection);
  while (!connection.output.empty()) {
    Connection::Piece& front = connection.output.front();
    if (front.file != nullptr) {  // a shared file: sendfile, no copy through user space
      off_t offset = static_cast<off_t>(front.offset);
      const ssize_t sent =
          sendfile(connection.fd, front.file->fd(), &offset, front.file->size() - front.offset);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return false;
      }
      front.offset = static_cast<size_t>(offset);
      if (front.offset >= front.file->size()) connection.output.pop_front();
      continue;
    }
    // The memory pieces up to the next file in one sendmsg; MSG_MORE when a file follows, so that
    // the headers and the file's first bytes share packets.
    iovec vectors[16];
    int count = 0;
    bool file_follows = false;
    for (auto it = connection.output.begin(); it != connection.output.end() && count < 16;
         ++it, ++count) {
      if (it->file != nullptr) {
        file_follows = true;
        break;
      }
      const std::string_view data = it->view();
      vectors[count].iov_base = const_cast<char*>(data.data() + it->offset);
      vectors[count].iov_len = data.size() - it->offset;
    }
    msghdr message{};
    message.msg_iov = vectors;
    message.msg_iovlen = static_cast<size_t>(count);
    const ssize_t written =
        sendmsg(connection.fd, &message, MSG_NOSIGNAL | (file_follows ? MSG_MORE : 0));
    if (written < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    size_t remaining = static_cast<size_t>(written);
    while (remaining > 0 && !connection.output.empty()) {
      Connection::Piece& piece = connection.output.front();
      const size_t left = piece.size() - piece.offset;
      if (remaining >= left) {
        remaining -= left;
        connection.output.pop_front();
      } else {
        piece.offset += remaining;
        remaining = 0;
      }
    }
  }
  // Only ask for EPOLLOUT while output is pending, and only touch epoll when that changes.
  WatchWritable(connection);
  return !(connection.output.empty() && connection.close_after_write);
}

}  // namespace vigil
