// Fuzz targets of common's parsers (testing/fuzz.h): the HTTP server's request heads — what any
// client on the network sends the exporter and the health check — and durations (flags, YAML).
// For any input: no crash, no read out of bounds (ASan in `make fuzz`), and what parses is made
// of the input's own bytes.
#include "testing/fuzz.h"

#include "common/duration.h"
#include "common/http_server.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(CommonFuzzTest, RequestHeadsParseIntoTheirOwnBytesOrNotAtAll) {
  const std::vector<std::string> seeds = {
      "GET /metrics HTTP/1.1\r\nHost: node-1:9400\r\nAccept-Encoding: gzip\r\nUser-Agent: "
      "Prometheus/2.45.0\r\nConnection: keep-alive",
      "HEAD /healthz HTTP/1.0\r\nConnection: Keep-Alive",
      "GET /status?pretty=1 HTTP/1.1\r\nContent-Length: 5",
      "POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\nAccept-Encoding: br, gzip;q=0",
      "GET / HTTP/1.1\r\nConnection: close\r\nAccept-Encoding: identity"};
  const testing::FuzzRun run = testing::Fuzz(
      "http request head", seeds, "GET HEAD/ metrics?=&:\r\nHTTP/1.01 Connection: close gzip,;q",
      100'000, [](const std::string& input) {
        const std::optional<HttpRequestHead> head = ParseRequestHead(input);
        if (!head.has_value()) return false;
        EXPECT_FALSE(head->method.empty()) << input;
        EXPECT_NE(input.find(head->method), std::string::npos) << input;
        EXPECT_NE(input.find(head->request.path), std::string::npos) << input;
        EXPECT_EQ(head->request.path.find('?'), std::string::npos) << input;
        return true;
      });
  EXPECT_GT(run.accepted, run.inputs / 20) << "the mutations still reach past the request line";
}

TEST(CommonFuzzTest, DurationsParseOrSayWhy) {
  const std::vector<std::string> seeds = {"5s", "1m30s", "250ms", "24h", "0", "1.5h", "10us"};
  testing::Fuzz("duration", seeds, "0123456789.hmsun-+ ", 100'000, [](const std::string& input) {
    const absl::StatusOr<absl::Duration> duration = ParseDuration(input);
    if (!duration.ok()) {
      EXPECT_FALSE(duration.status().message().empty()) << input;
      return false;
    }
    return true;
  });
}

}  // namespace
}  // namespace vigil
