// Implements HttpDaemon with cpp-httplib's client.
#include "daemon.h"

#include <regex>

#include "absl/time/clock.h"
#include "httplib.h"

namespace vigil::testing {

HttpDaemon::HttpDaemon(const std::string& command, const std::string& dir,
                       const std::string& engine, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {VigilBinary(), command, "--listen", "127.0.0.1:0"};
  if (!engine.empty()) {
    args.push_back("--engine");
    args.push_back(engine);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  process_ = std::make_unique<Process>(args, dir);
  if (!process_->WaitForStderr("listening on http")) return;  // http:// or https://
  std::smatch match;
  const std::string log = process_->Stderr();
  if (std::regex_search(log, match,
                        std::regex("listening on https?://127\\.0\\.0\\.1:([0-9]+)/"))) {
    port_ = std::stoi(match[1]);
  }
}

std::string HttpDaemon::Get(const std::string& path, int* status) const {
  httplib::Client client("127.0.0.1", port_);
  client.set_read_timeout(5, 0);
  auto response = client.Get(path.c_str());
  if (status != nullptr) *status = response ? response->status : -1;
  return response ? response->body : "";
}

std::string HttpDaemon::GetUntil(const std::string& path,
                                 const std::function<bool(const std::string&)>& predicate,
                                 absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  std::string body;
  do {
    body = Get(path);
    if (predicate(body)) return body;
    absl::SleepFor(absl::Milliseconds(20));  // polling a server in another process
  } while (absl::Now() < deadline);
  return body;
}

double SeriesValue(const std::string& scrape, const std::string& name) {
  const size_t at = scrape.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(scrape.substr(at + name.size() + 2));
}

}  // namespace vigil::testing
