// The deployment's architecture without Kubernetes: two "nodes", each a network namespace with
// its own engine (its own node name), exporter and health check, and each node's clients using
// the same engine address, 127.0.0.1:5555 — as every Pod on Kubernetes uses the one Service
// name that internalTrafficPolicy: Local resolves to its own node's engine. An XID on node A
// turns A's health check and exporter FAIL and leaves B PASS; B's health check pointed at A's
// engine refuses it by node identity.
//
// Needs root with CAP_SYS_ADMIN (ip netns); where the environment does not allow network
// namespaces the test says so and skips.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One node: a network namespace with loopback up, and the processes started in it.
class Node {
 public:
  Node(std::string name, const TempDir& dir)
      : name_(std::move(name)),
        netns_(absl::StrCat("vigil-", getpid(), "-", name_)),
        dir_(dir.path().string()) {
    created_ =
        Shell("ip netns add " + netns_ + " && ip netns exec " + netns_ + " ip link set lo up")
            .exit_code == 0;
  }
  ~Node() {
    processes_.clear();  // SIGKILLs what still runs, before the namespace goes
    if (created_) Shell("ip netns del " + netns_);
  }
  bool created() const { return created_; }
  const std::string& name() const { return name_; }
  std::string socket() const { return dir_ + "/" + name_ + ".sock"; }

  // Starts `vigil args...` inside the namespace; returns it.
  Process& Start(const std::vector<std::string>& args) {
    std::string command = "exec ip netns exec " + netns_ + " " + VigilBinary();
    for (const std::string& arg : args) command += " '" + arg + "'";
    processes_.push_back(
        std::make_unique<Process>(std::vector<std::string>{"/bin/sh", "-c", command}, dir_));
    return *processes_.back();
  }
  // GET http://127.0.0.1:<port><path> from inside the namespace: {HTTP status, body}.
  std::pair<int, std::string> Get(int port, const std::string& path) const {
    auto result = Shell("ip netns exec " + netns_ + " curl -s -m 5 -w '\\n%{http_code}' " +
                        "http://127.0.0.1:" + std::to_string(port) + path);
    const size_t last = result.out.rfind('\n');
    if (result.exit_code != 0 || last == std::string::npos) return {0, ""};
    return {std::atoi(result.out.c_str() + last + 1), result.out.substr(0, last)};
  }

  // The engine, exporter and health check of this node, all at the same engine address.
  void StartAll() {
    Start({"engine", "--backend", "sim", "--gpus", "4", "--node-name", name_, "--socket", socket(),
           "--listen", "127.0.0.1:5555", "--state-dir", dir_ + "/state-" + name_});
    EXPECT_TRUE(processes_.back()->WaitForStderr("engine ready")) << processes_.back()->Stderr();
    Start({"exporter", "--engine", "127.0.0.1:5555", "--listen", "127.0.0.1:9400", "--node-name",
           name_});
    Start({"healthcheck", "--engine", "127.0.0.1:5555", "--listen", "127.0.0.1:9401", "--node-name",
           name_});
  }

 private:
  std::string name_;
  std::string netns_;
  std::string dir_;
  bool created_ = false;
  std::vector<std::unique_ptr<Process>> processes_;
};

nlohmann::json Status(const Node& node) {
  auto [code, body] = node.Get(9401, "/status");
  return nlohmann::json::parse(body, nullptr, false);
}

// GPU `gpu`'s status on the node's health check while its view is fresh, else "".
std::string GpuStatus(const Node& node, int gpu) {
  const nlohmann::json status = Status(node);
  if (!status.is_object() || status["fresh"] != true) return "";
  return status["gpus"][gpu]["status"].get<std::string>();
}

TEST(TwoNodeTest, EachNodesClientsSeeOnlyTheirOwnEngine) {
  TempDir dir;
  Node a("node-a", dir);
  Node b("node-b", dir);
  if (!a.created() || !b.created()) {
    GTEST_SKIP() << "cannot create network namespaces here (ip netns needs root with "
                    "CAP_SYS_ADMIN); the two-node test did not run";
  }
  a.StartAll();
  b.StartAll();
  for (const Node* node : {&a, &b}) {
    ASSERT_TRUE(Eventually([&] { return GpuStatus(*node, 1) == "PASS"; }))
        << node->name() << ": " << node->Get(9401, "/status").second;
  }

  // Same address, different engines: each node's clients report their own node's engine.
  EXPECT_THAT(a.Get(9400, "/metrics").second, HasSubstr("node=\"node-a\""));
  EXPECT_THAT(b.Get(9400, "/metrics").second, HasSubstr("node=\"node-b\""));

  // An XID on node A (over A's Unix socket, as a drill would do it).
  auto inject =
      Vigil({"inject", "xid", "--gpu", "1", "--xid", "79", "--engine", "unix://" + a.socket()});
  ASSERT_EQ(inject.exit_code, 0) << inject.err;
  EXPECT_TRUE(Eventually([&] { return GpuStatus(a, 1) == "FAIL"; }))
      << a.Get(9401, "/status").second;
  EXPECT_EQ(Status(a)["status"], "FAIL");
  EXPECT_TRUE(Eventually([&] {
    return a.Get(9400, "/metrics").second.find("vigil_gpu_health_status{gpu=\"1\",") !=
               std::string::npos &&
           a.Get(9400, "/metrics").second.find("system=\"driver\",injected=\"true\"} 20") !=
               std::string::npos;
  }));
  // Node B stays healthy.
  EXPECT_EQ(GpuStatus(b, 1), "PASS");
  EXPECT_NE(Status(b)["status"], "FAIL");
  EXPECT_THAT(b.Get(9400, "/metrics").second, Not(HasSubstr("} 20\n")));

  // B's health check pointed at A's engine (its Unix socket) refuses it.
  b.Start({"healthcheck", "--engine", "unix://" + a.socket(), "--listen", "127.0.0.1:9402",
           "--node-name", "node-b"});
  std::pair<int, std::string> ready;
  EXPECT_TRUE(Eventually([&] {
    ready = b.Get(9402, "/readyz");
    return ready.first == 503 && ready.second.find("node-a") != std::string::npos;
  })) << ready.first
      << " " << ready.second;
  EXPECT_THAT(ready.second, HasSubstr("node-b"));
}

}  // namespace
}  // namespace vigil::testing
