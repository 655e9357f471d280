// The real `vigil exporter` / `vigil healthcheck` daemons as background processes of an
// end-to-end test, reached over HTTP on the port they picked (they log it when listening).
// Not thread-safe: owned by one test.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "process.h"

namespace vigil::testing {

class HttpDaemon {
 public:
  // Runs `vigil COMMAND --listen 127.0.0.1:0 --engine ENGINE EXTRA...` (no --engine when ENGINE
  // is empty) and waits until it logs "listening on http://127.0.0.1:PORT/PATH"; port() is 0
  // when it did not.
  HttpDaemon(const std::string& command, const std::string& dir, const std::string& engine,
             const std::vector<std::string>& extra = {});

  // GET `path`; "" and *status -1 when nothing answered.
  std::string Get(const std::string& path, int* status = nullptr) const;
  // GETs `path` until `predicate` holds on the body or `timeout` passes; returns the last body.
  std::string GetUntil(const std::string& path,
                       const std::function<bool(const std::string&)>& predicate,
                       absl::Duration timeout = absl::Seconds(10)) const;
  int port() const { return port_; }
  Process& process() { return *process_; }

 private:
  std::unique_ptr<Process> process_;
  int port_ = 0;
};

// The value of the unlabelled series `name` in a Prometheus scrape; -1 when absent.
double SeriesValue(const std::string& scrape, const std::string& name);

}  // namespace vigil::testing
