// Benchmark of the health check's load on the Kubernetes API (`make bench`), with the real
// binaries: N nodes (`node-1` … `node-N`), each with its own simulated engine and
// `vigil healthcheck --kubernetes --taint`, against the fake API server (which records every
// request and serves watches as the real one does). After every node has its condition written
// and its watch open, and half a heartbeat more, it counts the requests of a steady-state window
// (VIGIL_FLEET_STEADY_MINUTES, default 10: two heartbeats at the default 5 minutes), then injects
// XID 79 into one GPU of 5 nodes and counts the requests those transitions cost (condition,
// Event, taint) and the watch events they fan out to the fleet. It reports requests per node per
// minute (the goal: <= 0.3, the open watch excluded), requests per transition, watch connections,
// and the load extrapolated to 2,000 nodes.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <regex>

#include "absl/time/clock.h"
#include "daemon.h"
#include "fmt/format.h"
#include "process.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using Json = nlohmann::json;
using testing::FakeKubeApi;
using testing::KubeRequest;

int SteadyMinutes() {
  const char* text = std::getenv("VIGIL_FLEET_STEADY_MINUTES");
  return text != nullptr && std::atoi(text) > 0 ? std::atoi(text) : 10;
}

bool HasCondition(const Json& node, const std::string& status) {
  return testing::ConditionStatus(node, "GpuProblem") == status;
}

bool Tainted(const Json& node) {
  return testing::HasNoScheduleTaint(node, "vigil.dev/gpu-problem");
}

// Requests by kind: "watch", "list", "get node", "patch status", "patch node", "event".
std::map<std::string, int> ByKind(const std::vector<KubeRequest>& requests) {
  std::map<std::string, int> kinds;
  for (const KubeRequest& request : requests) {
    if (request.watch()) {
      ++kinds["watch"];
    } else if (request.path.find("/events") != std::string::npos) {
      ++kinds["event"];
    } else if (request.list()) {
      ++kinds["list"];
    } else if (request.method == "GET") {
      ++kinds["get node"];
    } else if (request.path.ends_with("/status")) {
      ++kinds["patch status"];
    } else {
      ++kinds["patch node"];
    }
  }
  return kinds;
}

std::string Describe(const std::map<std::string, int>& kinds) {
  std::string out;
  for (const auto& [kind, count] : kinds)
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", count, kind);
  return out.empty() ? "none" : out;
}

// The sum of one counter over every health check's /metrics.
double SumMetric(const std::vector<std::unique_ptr<testing::HttpDaemon>>& checks,
                 const std::string& name) {
  double sum = 0;
  const std::regex line("(^|\n)" + name + " ([0-9.e+]+)");
  for (const auto& check : checks) {
    std::smatch match;
    const std::string metrics = check->Get("/metrics");
    if (std::regex_search(metrics, match, line)) sum += std::stod(match[2]);
  }
  return sum;
}

void BM_KubeFleet(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  constexpr int kFaults = 5;
  const int steady_minutes = SteadyMinutes();
  testing::TempDir dir;
  std::string error;
  // One thread per open watch, and the rest.
  const std::unique_ptr<FakeKubeApi> server =
      FakeKubeApi::Start(dir.path().string(), &error, /*threads=*/nodes + 32);
  if (server == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  FakeKubeApi& api = *server;
  const testing::KubeCredentials& credentials = api.credentials();
  std::vector<std::unique_ptr<testing::EngineProcess>> engines;
  std::vector<std::unique_ptr<testing::HttpDaemon>> checks;
  for (int i = 1; i <= nodes; ++i) {
    const std::string name = fmt::format("node-{}", i);
    api.AddNode(name, {{"nvidia.com/gpu.present", "true"}});
    const std::string node_dir = (dir.path() / name).string();
    std::filesystem::create_directories(node_dir);
    engines.push_back(std::make_unique<testing::EngineProcess>(node_dir, name, 1));
    checks.push_back(std::make_unique<testing::HttpDaemon>(
        "healthcheck", node_dir, engines.back()->unix_address,
        std::vector<std::string>{"--node-name", name, "--kubernetes", "--taint",
                                 "--service-account-dir", credentials.service_account_dir}));
    if (engines.back()->unix_address.empty() || checks.back()->port() == 0) {
      state.SkipWithError(fmt::format("could not start {}'s engine or health check", name).c_str());
      return;
    }
  }
  auto all_written = [&] {
    for (int i = 1; i <= nodes; ++i) {
      if (!HasCondition(api.Node(fmt::format("node-{}", i)), "False")) return false;
    }
    return api.open_watches() == nodes;
  };
  if (!testing::Eventually(all_written, absl::Minutes(2), absl::Milliseconds(500))) {
    state.SkipWithError("not every node got its condition and opened its watch in 2 minutes");
    return;
  }
  const std::vector<KubeRequest> startup_requests = api.Requests();
  const std::map<std::string, int> startup = ByKind(startup_requests);

  for (auto _ : state) {
    // Steady state.
    // Every node wrote its condition within a few seconds at start-up, so their heartbeats come
    // together: a window that began there would end on the heartbeats and count half of them.
    // It begins half a heartbeat later, and is a whole number of heartbeats long.
    absl::SleepFor(absl::Minutes(5) / 2);
    api.ClearRequests();
    const absl::Time window_start = absl::Now();
    absl::SleepFor(absl::Minutes(steady_minutes));
    const std::vector<KubeRequest> steady = api.Requests();
    const std::map<std::string, int> steady_kinds = ByKind(steady);
    const int steady_watches = steady_kinds.contains("watch") ? steady_kinds.at("watch") : 0;
    const double per_node_minute =
        static_cast<double>(steady.size() - steady_watches) / nodes / steady_minutes;
    const double watch_per_node_minute =
        static_cast<double>(steady_watches) / nodes / steady_minutes;
    const int open_watches = api.open_watches();
    // Status writes per node in the window, and when they came (seconds after the window began;
    // the node's write at start-up first): a phase, or a late heartbeat, shows here.
    std::map<std::string, std::vector<absl::Time>> status_writes;
    for (const KubeRequest& request : startup_requests) {
      if (request.method == "PATCH" && request.path.ends_with("/status")) {
        status_writes[request.path].push_back(request.received);
      }
    }
    std::map<std::string, size_t> in_window;
    for (const KubeRequest& request : steady) {
      if (request.method == "PATCH" && request.path.ends_with("/status")) {
        ++in_window[request.path];
        status_writes[request.path].push_back(request.received);
      }
    }
    std::map<size_t, int> writes_per_node;
    for (int i = 1; i <= nodes; ++i) {
      ++writes_per_node[in_window[fmt::format("/api/v1/nodes/node-{}/status", i)]];
    }
    std::string distribution, samples;
    for (const auto& [count, how_many] : writes_per_node) {
      distribution +=
          fmt::format("{}{} nodes wrote {}", distribution.empty() ? "" : ", ", how_many, count);
    }
    for (int i : {1, nodes / 2, nodes}) {
      const std::string path = fmt::format("/api/v1/nodes/node-{}/status", i);
      samples += "\n    " + path + ":";
      for (absl::Time time : status_writes[path]) {
        samples += fmt::format(" {:+.1f}s", absl::ToDoubleSeconds(time - window_start));
      }
    }

    // Transitions: XID 79 (fallen off the bus: FAIL) on GPU 0 of kFaults nodes.
    const double events_before = SumMetric(checks, "vigil_healthcheck_kube_watch_events_total");
    api.ClearRequests();
    const absl::Time injected = absl::Now();
    for (int i = 1; i <= kFaults; ++i) {
      testing::Vigil(
          {"inject", "xid", "--engine", engines[i - 1]->unix_address, "--gpu", "0", "--xid", "79"});
    }
    auto all_tainted = [&] {
      for (int i = 1; i <= kFaults; ++i) {
        const Json node = api.Node(fmt::format("node-{}", i));
        if (!HasCondition(node, "True") || !Tainted(node)) return false;
      }
      return true;
    };
    if (!testing::Eventually(all_tainted, absl::Seconds(60), absl::Milliseconds(20))) {
      state.SkipWithError("the injected faults did not reach the nodes in 60 s");
      return;
    }
    const double to_taint_s = absl::ToDoubleSeconds(absl::Now() - injected);
    absl::SleepFor(absl::Seconds(20));  // anything late (a retry, a second write) is counted too
    const std::vector<KubeRequest> faults = api.Requests();
    const std::map<std::string, int> fault_kinds = ByKind(faults);
    // What the transitions cost: the failing nodes' requests and the Events (no other node
    // posts one); another node's heartbeat falling in this window is not theirs.
    int status_on_failing = 0, status_elsewhere = 0, transition_requests = 0;
    for (const KubeRequest& request : faults) {
      if (request.watch()) continue;
      bool failing = false;
      for (int i = 1; i <= kFaults; ++i) {
        const std::string node = fmt::format("/api/v1/nodes/node-{}", i);
        failing |= request.path == node || request.path == node + "/status";
      }
      const bool event = request.path.find("/events") != std::string::npos;
      transition_requests += failing || event;
      if (request.method == "PATCH" && request.path.ends_with("/status")) {
        ++(failing ? status_on_failing : status_elsewhere);
      }
    }
    const double per_transition = static_cast<double>(transition_requests) / kFaults;
    const double events_after = SumMetric(checks, "vigil_healthcheck_kube_watch_events_total");

    state.counters["nodes"] = nodes;
    state.counters["req_per_node_min"] = per_node_minute;
    state.counters["watch_req_per_node_min"] = watch_per_node_minute;
    state.counters["open_watches"] = open_watches;
    state.counters["req_per_transition"] = per_transition;
    state.counters["fail_to_taint_s"] = to_taint_s;
    state.counters["watch_events_per_transition"] = (events_after - events_before) / kFaults;
    state.counters["req_per_s_at_2000"] = per_node_minute * 2000 / 60;
    fmt::print(stderr, "kube fleet: {} nodes; start-up: {}\n", nodes, Describe(startup));
    fmt::print(stderr,
               "  steady state, {} min: {} ({:.3f} requests/node/min, watch re-opens excluded; "
               "{:.3f} watch re-opens/node/min)\n"
               "  status writes in the window: {}; e.g. (seconds from the window's start):{}\n",
               steady_minutes, Describe(steady_kinds), per_node_minute, watch_per_node_minute,
               distribution, samples);
    fmt::print(stderr, "  open watches: {} (one per node)\n", open_watches);
    fmt::print(stderr,
               "  {} transitions to FAIL: {} ({} status writes on the failing nodes, {} on the "
               "others; {:.1f} requests each), all tainted {:.2f} s after the injections; {:.0f} "
               "watch events delivered per transition (every node watches every GPU node)\n",
               kFaults, Describe(fault_kinds), status_on_failing, status_elsewhere, per_transition,
               to_taint_s, (events_after - events_before) / kFaults);
    fmt::print(stderr,
               "  at 2,000 nodes: {:.2f} requests/s in steady state ({:.2f} with re-watches), "
               "2,000 open watches; each node write goes to 2,000 watchers\n",
               per_node_minute * 2000 / 60, (per_node_minute + watch_per_node_minute) * 2000 / 60);
  }
}
BENCHMARK(BM_KubeFleet)->Arg(50)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace vigil
