// Tests for the epoll HTTP server: routing, methods, keep-alive and pipelining, refused bodies and
// oversized requests, shared bodies, and a port in use.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends raw bytes on one connection and reads until `responses` responses (or EOF) arrived.
std::string Exchange(int port, const std::string& request, int responses = 1) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string reply;
  char buffer[65536];
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  while (true) {
    // Count complete responses by their Content-Length.
    int complete = 0;
    size_t position = 0;
    while (true) {
      const size_t end = reply.find("\r\n\r\n", position);
      if (end == std::string::npos) break;
      const size_t length_at = reply.find("Content-Length: ", position);
      const size_t length = std::stoul(reply.substr(length_at + 16));
      const bool head = request.starts_with("HEAD");
      if (!head && reply.size() < end + 4 + length) break;
      position = end + 4 + (head ? 0 : length);
      ++complete;
    }
    if (complete >= responses) break;
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return reply;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    body_ = std::make_shared<const std::string>(std::string(100000, 'x'));
    server_.Get("/hello", [] { return HttpResponse{.body = "hello\n"}; });
    server_.Get("/big", [this] {
      return HttpResponse{
          .content_type = "text/plain; version=0.0.4", .shared_body = body_, .body = "tail\n"};
    });
    server_.Get("/unavailable", [] { return HttpResponse{.status = 503, .body = "no\n"}; });
    // A memory file between a shared prefix and a tail, gzip-labelled when the client accepts it.
    auto file = SharedFile::Create(std::string(300000, 'f'));
    ASSERT_TRUE(file.ok());
    file_ = *file;
    server_.Get("/file", [this](const HttpRequest& request) {
      return HttpResponse{.content_encoding = request.accepts_gzip ? "gzip" : "",
                          .vary_accept_encoding = true,
                          .shared_prefix = std::make_shared<const std::string>("head\n"),
                          .file_body = file_,
                          .body = "tail\n"};
    });
    ASSERT_TRUE(server_.Start("127.0.0.1:0").ok());
  }

  std::shared_ptr<const std::string> body_;
  std::shared_ptr<const SharedFile> file_;
  HttpServer server_;
};

TEST_F(HttpServerTest, ServesRoutesWithStatusAndHeaders) {
  const std::string reply = Exchange(server_.port(), "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(reply, HasSubstr("Content-Length: 6\r\n"));
  EXPECT_THAT(reply, HasSubstr("Connection: keep-alive\r\n"));
  EXPECT_THAT(reply, ::testing::EndsWith("\r\n\r\nhello\n"));
  EXPECT_THAT(Exchange(server_.port(), "GET /unavailable HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(Exchange(server_.port(), "GET /nothing HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(Exchange(server_.port(), "GET /hello?x=1 HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpServerTest, AMemoryFileIsSentWholeInOrderOnEveryRequest) {
  for (int i = 0; i < 2; ++i) {  // the file's offset is the connection's, not the file's
    const std::string reply = Exchange(server_.port(), "GET /file HTTP/1.1\r\n\r\n");
    EXPECT_THAT(reply, HasSubstr("Content-Length: 300010\r\n"));
    EXPECT_THAT(reply, HasSubstr("Vary: Accept-Encoding\r\n"));
    EXPECT_THAT(reply, ::testing::Not(HasSubstr("Content-Encoding")));
    EXPECT_THAT(reply, ::testing::EndsWith("\r\n\r\nhead\n" + std::string(300000, 'f') + "tail\n"));
  }
  // Two pipelined requests on one connection, the second asking for gzip.
  const std::string two = Exchange(server_.port(),
                                   "GET /file HTTP/1.1\r\n\r\nGET /file HTTP/1.1\r\n"
                                   "Accept-Encoding: deflate, gzip\r\n\r\n",
                                   2);
  EXPECT_EQ(two.find("Content-Encoding: gzip\r\n"), two.rfind("Content-Encoding: gzip\r\n"));
  EXPECT_NE(two.find("Content-Encoding: gzip\r\n"), std::string::npos);
  EXPECT_GT(two.find("Content-Encoding: gzip\r\n"), two.find("tail\n"));
}

TEST_F(HttpServerTest, SharedBodyAndTailArriveWhole) {
  const std::string reply = Exchange(server_.port(), "GET /big HTTP/1.1\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("Content-Length: 100005\r\n"));
  EXPECT_THAT(reply, HasSubstr("Content-Type: text/plain; version=0.0.4\r\n"));
  EXPECT_THAT(reply, ::testing::EndsWith(std::string(100000, 'x') + "tail\n"));
}

TEST_F(HttpServerTest, KeepAliveAndPipelinedRequestsOnOneConnection) {
  const std::string reply = Exchange(
      server_.port(),
      "GET /hello HTTP/1.1\r\n\r\nGET /big HTTP/1.1\r\n\r\nGET /hello HTTP/1.1\r\n\r\n", 3);
  size_t count = 0;
  for (size_t at = reply.find("HTTP/1.1 200"); at != std::string::npos;
       at = reply.find("HTTP/1.1 200", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 3u);
}

TEST_F(HttpServerTest, HeadHasNoBodyAndOtherMethodsAreRefused) {
  const std::string head = Exchange(server_.port(), "HEAD /big HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("Content-Length: 100005\r\n"));
  EXPECT_THAT(head, ::testing::EndsWith("\r\n\r\n"));
  EXPECT_THAT(Exchange(server_.port(), "DELETE /hello HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 405"));
}

TEST_F(HttpServerTest, ConnectionCloseAndHttp10CloseAfterTheResponse) {
  EXPECT_THAT(Exchange(server_.port(), "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(Exchange(server_.port(), "GET /hello HTTP/1.0\r\n\r\n"),
              HasSubstr("Connection: close\r\n"));
}

TEST_F(HttpServerTest, BadRequestsBodiesAndHugeHeadersAreRefused) {
  EXPECT_THAT(Exchange(server_.port(), "NONSENSE\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Exchange(server_.port(), "GET /hello HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"),
              StartsWith("HTTP/1.1 400"));
  const std::string huge = "GET /hello HTTP/1.1\r\nX: " + std::string(40000, 'a') + "\r\n\r\n";
  EXPECT_THAT(Exchange(server_.port(), huge), StartsWith("HTTP/1.1 431"));
  // The server is still fine afterwards.
  EXPECT_THAT(Exchange(server_.port(), "GET /hello HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpServerTest, APortInUseAndBadAddressesAreClearErrors) {
  HttpServer second;
  const absl::Status in_use = second.Start("127.0.0.1:" + std::to_string(server_.port()));
  EXPECT_EQ(in_use.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(in_use.message()), HasSubstr("choose another --listen"));
  EXPECT_EQ(second.Start("nonsense").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(second.Start("127.0.0.1:99999").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vigil
