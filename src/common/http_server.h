// A small HTTP server for the daemons' endpoints (/metrics, /healthz, /readyz, /status), over
// cpp-httplib, with Vigil's conventions: listen addresses as ":9400", "127.0.0.1:0" or
// "[::1]:9400"; clear errors for bad addresses and ports in use; a bounded thread pool.
// Thread-safety: handlers run on the pool's threads; Start()/Stop() from the owner.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace vigil {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;

  HttpServer();
  ~HttpServer();

  // Registers a GET handler. Before Start().
  void Get(const std::string& path, Handler handler);
  // Binds `address` and starts serving. InvalidArgument / AlreadyExists (port in use).
  absl::Status Start(const std::string& address, int threads = 4);
  void Stop();
  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string host_;
  int port_ = 0;
};

}  // namespace vigil
