// Implements HttpServer over cpp-httplib (Debian 12's 0.11: bind, then listen on a thread).
#include "common/http_server.h"

#include <pthread.h>

#include "common/strings.h"
#include "fmt/format.h"
#include "httplib.h"

namespace vigil {

HttpServer::HttpServer() : server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(const std::string& path, Handler handler) {
  server_->Get(path, [handler = std::move(handler)](const httplib::Request&,
                                                    httplib::Response& response) {
    HttpResponse result = handler();
    response.status = result.status;
    response.set_content(std::move(result.body), result.content_type.c_str());
  });
}

absl::Status HttpServer::Start(const std::string& address, int threads) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format(
        "--listen '{}' is not [HOST]:PORT (e.g. :9400, 127.0.0.1:9400, [::1]:9400)", address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  const std::optional<uint64_t> port = ParseUint64(address.substr(colon + 1));
  if (!port || *port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("--listen '{}': the port must be a number from 0 to 65535", address));
  }
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  const int bound = *port == 0 ? server_->bind_to_any_port(host)
                               : (server_->bind_to_port(host, static_cast<int>(*port))
                                      ? static_cast<int>(*port)
                                      : -1);
  if (bound < 0) {
    return absl::AlreadyExistsError(fmt::format(
        "cannot listen on {}: the address is in use or not available on this host: stop the "
        "other process or choose another --listen",
        address));
  }
  host_ = host;
  port_ = bound;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "vigil-http");
    server_->listen_after_bind();
  });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace vigil
