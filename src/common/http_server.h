// A small HTTP/1.1 server for the daemons' endpoints (/metrics, /healthz, /readyz, /status): one
// epoll thread, keep-alive, GET and HEAD only, responses written with writev straight from
// shared, pre-rendered bodies. Scrapes are the hot path of an exporter that Prometheus polls on
// every node; serving pre-built bytes from one event loop makes them cost about what a static
// file from nginx costs (see scripts/bench-scrape), with no thread per connection.
//
// Contract: handlers run on the server's thread and must not block (take a lock, copy a pointer,
// format a little). Requests are limited to 16 KiB of headers; bodies are refused; idle
// connections close after 60 s; at most 1024 connections (more are accepted and closed).
// A guard (SetGuard) adds what a web config asks for: TLS on new connections, a check of each
// request (basic auth), headers on every response (webconfig/ implements it).
// Thread-safety: Get() and SetGuard() before Start(); Start()/Stop() from the owner.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace vigil {

// An immutable body kept in a memory file (memfd) and sent with sendfile(2), as a static file
// server sends a file: the bytes are not copied through user space on every answer. Made once
// (per render) and shared by every answer that sends it. Thread-safe (immutable).
class SharedFile {
 public:
  // Internal (memfd_create, write) when the process is out of descriptors or memory; callers
  // fall back to a string body then.
  static absl::StatusOr<std::shared_ptr<const SharedFile>> Create(std::string_view data);
  ~SharedFile();
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;
  int fd() const { return fd_; }
  size_t size() const { return size_; }

 private:
  SharedFile(int fd, size_t size) : fd_(fd), size_(size) {}
  const int fd_;
  const size_t size_;
};

// What a handler may look at in a request.
struct HttpRequest {
  std::string path;           // without the query string
  bool accepts_gzip = false;  // its Accept-Encoding allows gzip
  std::string authorization;  // the Authorization header's value; "" without one
};

// What the server reads from a request's head (the request line and headers, up to the blank
// line).
struct HttpRequestHead {
  std::string method;
  HttpRequest request;
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; HTTP/1.0 if "keep-alive"
  bool has_body = false;   // a non-zero Content-Length or a Transfer-Encoding
};
// Parses a request's head; nullopt when its first line is not "METHOD TARGET HTTP/1.x".
std::optional<HttpRequestHead> ParseRequestHead(std::string_view head);

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string content_encoding;  // "gzip" when the body is; "" none
  // The body depends on Accept-Encoding (caches must keep one per coding): `Vary`.
  bool vary_accept_encoding = false;
  std::string extra_headers;  // more header lines, "Name: value\r\n" each (WWW-Authenticate)
  // Sent as `shared_prefix`, `file_body`, `shared_body`, then `body`; any may be empty. The
  // shared parts are not copied.
  std::shared_ptr<const std::string> shared_prefix;
  std::shared_ptr<const SharedFile> file_body;
  std::shared_ptr<const std::string> shared_body;
  std::string body;
};

// What a server's owner may ask of every connection and request beyond the routes. Called on the
// server's thread only: implementations must not block for long (a bcrypt check is the most).
class HttpGuard {
 public:
  virtual ~HttpGuard() = default;
  // The TLS context for a connection accepted now; nullptr for plain HTTP. The server holds the
  // context for as long as the connection lives.
  virtual std::shared_ptr<SSL_CTX> TlsContext() = 0;
  // nullopt when `request` may be answered; otherwise the response instead (401).
  virtual std::optional<HttpResponse> Check(const HttpRequest& request) = 0;
  // Header lines ("Name: value\r\n" each) added to every response.
  virtual std::string ExtraHeaders() = 0;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  using RequestHandler = std::function<HttpResponse(const HttpRequest&)>;

  HttpServer();
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers the handler of `path` (exact match; a query string is ignored).
  void Get(const std::string& path, Handler handler);
  void Get(const std::string& path, RequestHandler handler);
  // Not owned; must outlive the server. nullptr (the default): plain HTTP, every request served.
  void SetGuard(HttpGuard* guard) { guard_ = guard; }
  // Binds `address` ("[HOST]:PORT"; port 0 picks one) and starts serving. InvalidArgument for a
  // bad address, AlreadyExists when the port is taken.
  absl::Status Start(const std::string& address);
  void Stop();
  int port() const { return port_; }

 private:
  struct Connection;
  void Loop();
  void Accept();
  // Reads what is available; answers complete requests. False when the connection must close.
  bool OnReadable(Connection& connection);
  bool Flush(Connection& connection);
  // The handler's response for a request, or the error response (405, 404).
  HttpResponse Route(std::string_view method, const HttpRequest& request) const;
  // Queues `response` on the connection (headers only for HEAD).
  void Send(Connection& connection, HttpResponse response, bool keep_alive, bool head_only);
  void Close(int fd);

  // Reads into `buffer`: bytes read, 0 at the end, -1 with errno EAGAIN when nothing more now,
  // -1 with another errno on an error.
  ssize_t Receive(Connection& connection, char* buffer, size_t size);
  // Writes the TLS connection's pending output; false when it must close.
  bool FlushTls(Connection& connection);
  // Asks epoll for EPOLLOUT exactly while the connection has output (or a TLS read) waiting on it.
  void WatchWritable(Connection& connection);

  std::map<std::string, RequestHandler> handlers_;
  HttpGuard* guard_ = nullptr;
  std::map<int, std::unique_ptr<Connection>> connections_;  // owned by the loop thread
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace vigil
