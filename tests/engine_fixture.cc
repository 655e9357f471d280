// Implements EngineFixture.
#include "engine_fixture.h"

#include "gtest/gtest.h"

namespace vigil::testing {

EngineFixture::EngineFixture(FixtureOptions options, std::string socket_path)
    : socket_path_(socket_path.empty() ? dir_.File("vigil.sock") : std::move(socket_path)) {
  auto sim = SimBackend::Create({.gpu_count = options.gpus, .seed = options.seed});
  EXPECT_TRUE(sim.ok());
  sim_ = sim->get();
  EngineConfig config;
  config.tick_interval = options.tick;
  config.subscriber_queue_depth = options.queue_depth;
  for (const FieldInfo& field : AllFields()) config.interval_overrides[field.id] = options.tick;
  auto engine = Engine::Create({.node_name = options.node_name, .config = config}, std::move(*sim));
  EXPECT_TRUE(engine.ok()) << engine.status();
  engine_ = std::move(*engine);
  auto server = EngineServer::Start(
      engine_.get(), {.unix_socket_path = socket_path_, .tcp_address = "127.0.0.1:0"});
  EXPECT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  loop_ = std::make_unique<TickLoop>(engine_.get(), options.tick);
  loop_->Start();
}

EngineFixture::~EngineFixture() { Stop(); }

void EngineFixture::Stop() {
  if (loop_) loop_->Stop();
  if (server_) server_->Shutdown(absl::Seconds(2));
}

std::unique_ptr<EngineClient> EngineFixture::Client(const std::string& address) const {
  auto client = EngineClient::Create(address, {.call_timeout = absl::Seconds(5)});
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

}  // namespace vigil::testing
