// Benchmark of the API server's cost of a fleet of health checks and the remediator (`make
// bench`), at two fleet sizes, to show how it grows. Each of N nodes (`node-1` … `node-N`) runs
// the health check's node reporter in process — the same reporter, informers and breaker code as
// `vigil healthcheck --kubernetes --taint --remediation`, each with its own HTTPS client — with a
// verdict the benchmark sets (the engines are not what is measured); the remediator is the real
// binary (`vigil remediator --mode off`: it watches every GPU node and publishes the circuit
// breaker, and acts on nothing). All against the fake API server, which records every request
// and counts the watch events it sends.
// Per size it reports:
// - open watches (the API server's connections held);
// - steady state: requests per node per minute over ten minutes on the reporters' fake clock
//   (two heartbeats at the default five minutes; watches' re-opens, on the server's real-time
//   timeouts, are not in it);
// - watch events delivered per node write, from writes of every node as the kubelet would make
//   them (the fan-out: who receives one node's write), and the same with one more informer per
//   node watching every GPU node, as each check did before (the fan-out that design paid);
// - for XID-79-like transitions to FAIL on 5 nodes: requests each (condition, Event, taint with
//   the faults), watch events each, conflicts;
// - the remediator's CPU time per node event it received and its RSS, and the RSS it holds per
//   GPU node (the difference between the two sizes).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "absl/time/clock.h"
#include "api/circuit_breaker.h"
#include "daemon.h"
#include "fmt/format.h"
#include "healthcheck/node_reporter.h"
#include "kube/informer.h"
#include "kube/kube_api.h"
#include "process.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using Json = nlohmann::json;
using testing::FakeKubeApi;
using testing::KubeRequest;

// CPU seconds (user + system) and resident KiB of process `pid`.
struct ProcessUse {
  double cpu_s = 0;
  double rss_kib = 0;
};
ProcessUse Use(pid_t pid) {
  ProcessUse use;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3; utime 14, stime 15.
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::vector<std::string> values{std::istream_iterator<std::string>(fields),
                                  std::istream_iterator<std::string>()};
  if (values.size() > 13) {
    use.cpu_s = (std::stod(values[11]) + std::stod(values[12])) / sysconf(_SC_CLK_TCK);
  }
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) use.rss_kib = std::stod(line.substr(6));
  }
  return use;
}

// One node's health check: its reporter, its own client, the verdict it reports.
struct Check {
  std::unique_ptr<kube::InClusterKube> kube;
  std::unique_ptr<NodeReporter> reporter;
  std::optional<DesiredCondition> desired;
  std::optional<PublishedFaults> faults;
};

const DesiredCondition kHealthy{.status = "False",
                                .reason = "GpusHealthy",
                                .message = "engine e seq 1: all 8 GPUs pass",
                                .identity = ""};
const DesiredCondition kFailed{.status = "True",
                               .reason = "GpuFailed",
                               .message =
                                   "engine e seq 2: GPU 0 FAIL: driver "
                                   "DCGM_FR_FALLEN_OFF_BUS: XID 79",
                               .identity = "GPU-0: driver/DCGM_FR_FALLEN_OFF_BUS;"};

int NodeWrites(const std::vector<KubeRequest>& requests) {
  int writes = 0;
  for (const KubeRequest& request : requests) {
    writes += request.method == "PATCH" && request.path.starts_with("/api/v1/nodes/");
  }
  return writes;
}

void BM_KubeFleet(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  constexpr int kFaults = 5;
  testing::TempDir dir;
  std::string error;
  // Each check holds two watches (its node, the breaker) and the remediator one, and for a while
  // one more each (the old watch of every GPU node); a thread each.
  const std::unique_ptr<FakeKubeApi> server =
      FakeKubeApi::Start(dir.path().string(), &error, /*threads=*/3 * nodes + 32);
  if (server == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  FakeKubeApi& api = *server;
  for (int i = 1; i <= nodes; ++i) {
    api.AddNode(fmt::format("node-{}", i), {{"nvidia.com/gpu.present", "true"}});
  }
  testing::HttpDaemon remediator(
      "remediator", dir.path().string(), "",
      {"--mode", "off", "--identity", "vigil-remediator-0", "--lease-duration", "15s",
       "--service-account-dir", api.credentials().service_account_dir});
  if (remediator.port() == 0) {
    state.SkipWithError("the remediator did not start");
    return;
  }
  const pid_t remediator_pid = remediator.process().pid();
  // Its informer holds every node, and the breaker is published.
  if (!testing::Eventually(
          [&] { return !api.ConfigMap("vigil", "vigil-circuit-breaker").is_null(); },
          absl::Seconds(60))) {
    state.SkipWithError("the remediator did not publish the circuit breaker");
    return;
  }
  const ProcessUse remediator_idle = Use(remediator_pid);

  FakeClock clock(absl::Now());
  std::vector<std::unique_ptr<Check>> checks;
  for (int i = 1; i <= nodes; ++i) {
    auto check = std::make_unique<Check>();
    auto kube =
        kube::InClusterKube::Create(api.credentials().service_account_dir, "healthcheck", &clock);
    if (!kube.ok()) {
      state.SkipWithError(std::string(kube.status().message()).c_str());
      return;
    }
    check->kube = std::move(*kube);
    check->desired = kHealthy;
    check->faults = PublishedFaults{.engine = "e", .seq = 1};
    Check* self = check.get();
    check->reporter = std::make_unique<NodeReporter>(
        NodeReporterOptions{.node_name = fmt::format("node-{}", i), .taint = true},
        check->kube.get(), &clock, [self](absl::Time) {
          return DesiredNodeState{.condition = self->desired, .faults = self->faults};
        });
    check->reporter->StartWatching();
    checks.push_back(std::move(check));
  }
  std::string why;
  const auto all_synced = [&] {
    for (const auto& check : checks) {
      if (!check->reporter->node_watch().synced() ||
          !check->reporter->breaker().Published(&why).has_value()) {
        return false;
      }
    }
    return true;
  };
  if (!testing::Eventually(all_synced, absl::Minutes(2), absl::Milliseconds(200))) {
    state.SkipWithError(
        ("not every check saw its node and the breaker in 2 minutes: " + why).c_str());
    return;
  }
  // Each node's first condition.
  for (const auto& check : checks) (void)check->reporter->ReconcileOnce();
  absl::SleepFor(absl::Seconds(1));

  for (auto _ : state) {
    // Steady state: ten minutes of passes, one a second per node, on the reporters' clock.
    const ProcessUse measured_from = Use(remediator_pid);
    api.ClearRequests();
    uint64_t node_events = api.watch_events("Node");
    constexpr int kSteadyMinutes = 10;
    for (int second = 0; second < kSteadyMinutes * 60; ++second) {
      clock.Advance(absl::Seconds(1));
      for (const auto& check : checks) (void)check->reporter->ReconcileOnce();
    }
    const std::vector<KubeRequest> steady = api.Requests();
    int steady_requests = 0;
    std::map<std::string, int> steady_kinds;  // "PATCH /api/v1/nodes/*/status", ...
    int remediator_requests = 0;              // its Lease, on real time: not the nodes'
    for (const KubeRequest& request : steady) {
      if (request.watch()) continue;
      if (request.user_agent.find("(healthcheck)") == std::string::npos) {
        ++remediator_requests;
        continue;
      }
      ++steady_requests;
      std::string kind = request.path;
      if (kind.starts_with("/api/v1/nodes/")) {
        kind = kind.ends_with("/status") ? "/api/v1/nodes/*/status" : "/api/v1/nodes/*";
      }
      ++steady_kinds[request.method + " " + kind + (request.list() ? " (list)" : "")];
    }
    std::string steady_breakdown;
    for (const auto& [kind, count] : steady_kinds) {
      steady_breakdown += fmt::format("{}{} {}", steady_breakdown.empty() ? "" : ", ", count, kind);
    }
    const double per_node_minute = static_cast<double>(steady_requests) / nodes / kSteadyMinutes;
    const int heartbeat_writes = NodeWrites(steady);
    // Wait for the heartbeats' events to be delivered.
    const uint64_t expected_at_least = 2ull * heartbeat_writes;
    testing::Eventually([&] { return api.watch_events("Node") - node_events >= expected_at_least; },
                        absl::Seconds(30));
    absl::SleepFor(absl::Seconds(1));
    const double events_per_heartbeat =
        heartbeat_writes == 0
            ? 0
            : static_cast<double>(api.watch_events("Node") - node_events) / heartbeat_writes;

    // Writes by another client (the kubelet's status updates), one per node.
    node_events = api.watch_events("Node");
    for (int i = 1; i <= nodes; ++i) {
      api.ModifyNode(fmt::format("node-{}", i), [](Json& node) {
        node["status"]["conditions"][0]["lastHeartbeatTime"] = "2027-01-01T00:00:00Z";
      });
    }
    testing::Eventually([&] { return api.watch_events("Node") - node_events >= 2ull * nodes; },
                        absl::Seconds(30));
    absl::SleepFor(absl::Seconds(1));
    const double events_per_kubelet_write =
        static_cast<double>(api.watch_events("Node") - node_events) / nodes;

    // Before: every check watched every GPU node (the breaker's count). The same informer code
    // with that watch, one per node, for the same writes: the fan-out the old design paid.
    double events_per_write_before = 0;
    int writes_before = 0;  // node writes of this part (the remediator receives each)
    {
      std::vector<std::unique_ptr<kube::Informer>> fleet_watches;
      for (const auto& check : checks) {
        fleet_watches.push_back(std::make_unique<kube::Informer>(
            check->kube.get(),
            kube::InformerOptions{.path = "/api/v1/nodes",
                                  .label_selector = "nvidia.com/gpu.present=true",
                                  .description = "the GPU nodes (as before)"}));
        fleet_watches.back()->Start();
      }
      testing::Eventually(
          [&] {
            for (const auto& watch : fleet_watches) {
              if (!watch->synced() || watch->stats().watches.load() == 0) return false;
            }
            return true;
          },
          absl::Minutes(2), absl::Milliseconds(200));
      absl::SleepFor(absl::Seconds(1));
      node_events = api.watch_events("Node");
      for (int i = 1; i <= nodes; ++i) {
        api.ModifyNode(fmt::format("node-{}", i), [](Json& node) {
          node["status"]["conditions"][0]["lastHeartbeatTime"] = "2027-01-01T00:00:01Z";
        });
      }
      const uint64_t expected = static_cast<uint64_t>(nodes) * (nodes + 2);
      testing::Eventually([&] { return api.watch_events("Node") - node_events >= expected; },
                          absl::Seconds(60));
      absl::SleepFor(absl::Seconds(1));
      events_per_write_before = static_cast<double>(api.watch_events("Node") - node_events) / nodes;
      const int open_before = api.open_watches() - nodes;
      for (const auto& watch : fleet_watches) watch->Stop();
      // The server notices a watcher gone when it next writes to it: touch a node until every
      // one of those watches has ended, so none is counted below.
      writes_before = nodes;
      testing::Eventually(
          [&] {
            ++writes_before;
            api.ModifyNode("node-1", [](Json& node) {
              node["metadata"]["labels"]["vigil.dev/bench-touch"] =
                  std::to_string(absl::ToUnixNanos(absl::Now()));
            });
            return api.open_watches() <= open_before;
          },
          absl::Seconds(60), absl::Milliseconds(200));
      absl::SleepFor(absl::Seconds(1));
    }

    // Transitions: XID 79 on GPU 0 of kFaults nodes, with remediation's faults.
    absl::SleepFor(absl::Seconds(1));
    api.ClearRequests();
    node_events = api.watch_events("Node");
    const uint64_t breaker_events = api.watch_events("ConfigMap");
    const ProcessUse before = Use(remediator_pid);
    uint64_t conflicts_before = 0;
    for (const auto& check : checks) conflicts_before += check->reporter->stats().conflicts;
    for (int i = 0; i < kFaults; ++i) {
      Check& check = *checks[i];
      check.desired = kFailed;
      check.faults->seq = 2;
      check.faults->faults = {{.gpu = 0,
                               .uuid = "GPU-0",
                               .system = "driver",
                               .code = "DCGM_FR_FALLEN_OFF_BUS",
                               .action = v1::RECOMMENDED_ACTION_REBOOT}};
      clock.Advance(absl::Milliseconds(1));
      for (int pass = 0; pass < 3; ++pass) (void)check.reporter->ReconcileOnce();
    }
    const std::vector<KubeRequest> transitions = api.Requests();
    int transition_requests = 0;
    for (const KubeRequest& request : transitions) {
      transition_requests +=
          !request.watch() && request.user_agent.find("(healthcheck)") != std::string::npos;
    }
    const int transition_writes = NodeWrites(transitions);
    testing::Eventually(
        [&] { return api.watch_events("Node") - node_events >= 2ull * transition_writes; },
        absl::Seconds(30));
    absl::SleepFor(absl::Seconds(2));  // the remediator's pass, the breaker's write if any
    uint64_t conflicts = 0;
    int tainted = 0;
    for (const auto& check : checks) {
      conflicts += check->reporter->stats().conflicts;
      tainted += check->reporter->stats().tainted.load();
    }
    conflicts -= conflicts_before;
    const ProcessUse after = Use(remediator_pid);
    const uint64_t transition_events = api.watch_events("Node") - node_events;
    const uint64_t breaker_fanout = api.watch_events("ConfigMap") - breaker_events;
    // The remediator's CPU for everything it received meanwhile: one watch event per node write.
    const ProcessUse now = Use(remediator_pid);
    const int remediator_events = heartbeat_writes + nodes + writes_before + transition_writes;
    const double cpu_us_per_event =
        (now.cpu_s - measured_from.cpu_s) * 1e6 / std::max(1, remediator_events);
    state.counters["nodes"] = nodes;
    state.counters["open_watches"] = api.open_watches();
    state.counters["req_per_node_min"] = per_node_minute;
    state.counters["watch_events_per_node_write"] = events_per_kubelet_write;
    state.counters["watch_events_per_node_write_before"] = events_per_write_before;
    state.counters["req_per_transition"] = static_cast<double>(transition_requests) / kFaults;
    state.counters["watch_events_per_transition"] =
        static_cast<double>(transition_events) / kFaults;
    state.counters["conflicts"] = static_cast<double>(conflicts);
    state.counters["remediator_rss_mib"] = now.rss_kib / 1024;
    fmt::print(stderr, "kube fleet: {} nodes (in-process health checks, the real remediator)\n",
               nodes);
    fmt::print(stderr, "  open watches: {} ({} per check: its node, the breaker; 1 remediator)\n",
               api.open_watches(), 2);
    fmt::print(stderr,
               "  steady state, {} min on the checks' clock: {} requests by the checks ({:.3f} "
               "per node per minute: {}), {} heartbeat writes, {:.2f} watch events delivered per "
               "heartbeat write; the remediator's Lease meanwhile (real time): {} requests\n",
               kSteadyMinutes, steady_requests, per_node_minute, steady_breakdown, heartbeat_writes,
               events_per_heartbeat, remediator_requests);
    fmt::print(stderr,
               "  {} writes by another client (one per node): {:.2f} watch events delivered per "
               "node write; {:.2f} with every check also watching every GPU node, as before\n",
               nodes, events_per_kubelet_write, events_per_write_before);
    fmt::print(stderr,
               "  {} transitions to FAIL: {} requests by the checks ({:.1f} each), {} node "
               "writes, {} conflicts, {} watch events ({:.1f} each), breaker ConfigMap events "
               "{}; {} of {} nodes tainted\n",
               kFaults, transition_requests, static_cast<double>(transition_requests) / kFaults,
               transition_writes, conflicts, transition_events,
               static_cast<double>(transition_events) / kFaults, breaker_fanout, tainted, nodes);
    fmt::print(stderr,
               "  remediator: RSS {:.1f} MiB with {} GPU nodes ({:.1f} MiB when it had listed "
               "them); CPU {:.3f} s over the run, {:.3f} s during the transitions; {:.0f} us per "
               "node event received ({} node writes in the window)\n",
               now.rss_kib / 1024, nodes, remediator_idle.rss_kib / 1024,
               now.cpu_s - measured_from.cpu_s, after.cpu_s - before.cpu_s, cpu_us_per_event,
               remediator_events);
    state.counters["remediator_cpu_us_per_event"] = cpu_us_per_event;
  }
  for (const auto& check : checks) check->reporter->Stop();
}
BENCHMARK(BM_KubeFleet)->Arg(50)->Arg(200)->Iterations(1)->Unit(benchmark::kSecond);

// The remediator's memory per GPU node: the real binary's RSS with no GPU node, then once its
// watch has brought N nodes shaped as GPU nodes are (60 labels as GPU feature discovery and the
// cloud set them, the kubelet's annotations, the health check's condition, 40 container images in
// the status: about 11 KB of JSON each); the difference over N is what a node costs it.
void BM_RemediatorMemoryPerNode(benchmark::State& state) {
  testing::TempDir dir;
  std::string error;
  const std::unique_ptr<FakeKubeApi> server = FakeKubeApi::Start(dir.path().string(), &error);
  if (server == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  FakeKubeApi& api = *server;
  const auto add_nodes = [&](int from, int to) {
    for (int i = from; i <= to; ++i) {
      std::map<std::string, std::string> labels = {{"nvidia.com/gpu.present", "true"}};
      for (int label = 0; label < 60; ++label) {
        labels[fmt::format("feature.node.kubernetes.io/cpu-cpuid.FEATURE{}", label)] = "true";
      }
      const std::string name = fmt::format("gpu-node-{:05d}", i);
      api.AddNode(name, labels, Json::array(),
                  {{"node.alpha.kubernetes.io/ttl", "0"},
                   {"volumes.kubernetes.io/controller-managed-attach-detach", "true"},
                   {"csi.volume.kubernetes.io/nodeid", "{\"ebs.csi.aws.com\":\"i-0abc\"}"}});
      api.ModifyNode(name, [](Json& node) {
        // The condition every GPU node's health check keeps (the remediator reads it).
        node["status"]["conditions"].push_back(
            {{"type", "GpuProblem"},
             {"status", "False"},
             {"reason", "GpusHealthy"},
             {"message", "engine 5f0c2a91d4e8b7a6 seq 123456: all 8 GPUs pass"},
             {"lastHeartbeatTime", "2026-12-02T03:00:00Z"},
             {"lastTransitionTime", "2026-11-30T11:00:00Z"}});
        Json images = Json::array();
        for (int image = 0; image < 40; ++image) {
          images.push_back({{"names",
                             {fmt::format("nvcr.io/nvidia/pytorch@sha256:{:064x}", image),
                              fmt::format("nvcr.io/nvidia/pytorch:24.{:02d}-py3", image)}},
                            {"sizeBytes", 9'000'000'000 + image}});
        }
        node["status"]["images"] = images;
      });
    }
  };
  // It starts with none, so the heap its first list would leave behind (freed, then reused for
  // what it keeps) does not hide what the nodes cost.
  const int small = 0, large = static_cast<int>(state.range(0));
  testing::HttpDaemon remediator("remediator", dir.path().string(), "",
                                 {"--mode", "off", "--identity", "vigil-remediator-0",
                                  "--service-account-dir", api.credentials().service_account_dir});
  if (remediator.port() == 0) {
    state.SkipWithError("the remediator did not start");
    return;
  }
  const auto gpu_nodes = [&] {
    const std::string metrics = remediator.Get("/metrics");
    const size_t at = metrics.find("\nvigil_remediator_gpu_nodes ");
    return at == std::string::npos ? -1 : std::atoi(metrics.c_str() + at + 28);
  };
  for (auto _ : state) {
    if (!testing::Eventually([&] { return gpu_nodes() == small; }, absl::Seconds(60))) {
      state.SkipWithError("the remediator did not count the first nodes");
      return;
    }
    absl::SleepFor(absl::Seconds(2));
    const ProcessUse at_small = Use(remediator.process().pid());
    add_nodes(small + 1, large);
    if (!testing::Eventually([&] { return gpu_nodes() == large; }, absl::Minutes(5),
                             absl::Milliseconds(500))) {
      const std::string why =
          fmt::format("the remediator counted {} of {} nodes in 5 minutes; its log ends: {}",
                      gpu_nodes(), large,
                      remediator.process().Stderr().substr(
                          std::max<size_t>(remediator.process().Stderr().size(), 600) - 600));
      state.SkipWithError(why.c_str());
      return;
    }
    absl::SleepFor(absl::Seconds(2));
    const ProcessUse at_large = Use(remediator.process().pid());
    api.Compact();  // the fake's history of those changes: not needed any more
    const double per_node_bytes =
        (at_large.rss_kib - at_small.rss_kib) * 1024 / static_cast<double>(large - small);
    state.counters["rss_mib_small"] = at_small.rss_kib / 1024;
    state.counters["rss_mib_large"] = at_large.rss_kib / 1024;
    state.counters["bytes_per_node"] = per_node_bytes;
    fmt::print(stderr,
               "remediator memory: RSS {:.1f} MiB with {} GPU nodes, {:.1f} MiB with {}: {:.0f} "
               "bytes per node (each node about {} bytes of JSON on the wire); CPU {:.2f} s for "
               "the {} nodes added\n",
               at_small.rss_kib / 1024, small, at_large.rss_kib / 1024, large, per_node_bytes,
               api.Node("gpu-node-00001").dump().size(), at_large.cpu_s - at_small.cpu_s,
               large - small);
  }
}
BENCHMARK(BM_RemediatorMemoryPerNode)->Arg(10000)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace vigil
