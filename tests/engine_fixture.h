// A real engine for end-to-end tests: simulated GPUs and the real gRPC server on a temporary Unix
// socket and an ephemeral 127.0.0.1 port, ticking either on the real tick loop (fast, so tests
// finish quickly) or, with `manual_ticks`, only when the test calls Tick() on a fake clock — for
// tests that count ticks. A start that fails is a test failure and started() is false; tests
// ASSERT_TRUE(fixture.started()) before using it. Not thread-safe: owned by one test.
#pragma once

#include <memory>
#include <string>

#include "backend/sim_backend.h"
#include "client/engine_client.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "engine/tick_loop.h"
#include "server/server.h"
#include "testing/temp_dir.h"

namespace vigil::testing {

struct FixtureOptions {
  uint32_t gpus = 4;
  uint64_t seed = 5;
  absl::Duration tick = absl::Milliseconds(50);
  std::string node_name = "n1";
  size_t queue_depth = 16;
  bool manual_ticks = false;  // no tick loop: the test drives Tick() on a fake clock
};

class EngineFixture {
 public:
  // socket_path: reuse a path (to restart an engine where a client expects it); "" for a new one.
  explicit EngineFixture(FixtureOptions options = {}, std::string socket_path = "");
  ~EngineFixture();

  bool started() const { return server_ != nullptr; }
  Engine& engine() { return *engine_; }
  SimBackend& sim() { return *sim_; }
  const std::string& socket_path() const { return socket_path_; }
  std::string unix_address() const { return "unix://" + socket_path_; }
  std::string tcp_address() const { return "127.0.0.1:" + std::to_string(server_->tcp_port()); }
  std::unique_ptr<EngineClient> Client(const std::string& address) const;
  // manual_ticks: advances the fake clock by one interval and runs one tick.
  void Tick();
  // Stops ticking, ends streams, stops the server.
  void Stop();

 private:
  const FixtureOptions options_;
  TempDir dir_;
  std::string socket_path_;
  FakeClock fake_clock_;
  SimBackend* sim_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineServer> server_;
  std::unique_ptr<TickLoop> loop_;
};

}  // namespace vigil::testing
