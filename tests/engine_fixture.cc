// Implements EngineFixture.
#include "engine_fixture.h"

#include "gtest/gtest.h"

namespace vigil::testing {

EngineFixture::EngineFixture(FixtureOptions options, std::string socket_path)
    : options_(std::move(options)),
      socket_path_(socket_path.empty() ? dir_.File("vigil.sock") : std::move(socket_path)) {
  auto sim = SimBackend::Create({.gpu_count = options_.gpus, .seed = options_.seed});
  if (!sim.ok()) {
    ADD_FAILURE() << "the simulated backend did not start: " << sim.status();
    return;
  }
  sim_ = sim->get();
  EngineConfig config;
  config.tick_interval = options_.tick;
  config.subscriber_queue_depth = options_.queue_depth;
  for (const FieldInfo& field : AllFields()) config.interval_overrides[field.id] = options_.tick;
  Clock* clock = options_.manual_ticks ? &fake_clock_ : Clock::Real();
  auto engine = Engine::Create({.node_name = options_.node_name, .config = config, .clock = clock},
                               std::move(*sim));
  if (!engine.ok()) {
    ADD_FAILURE() << "the engine did not start: " << engine.status();
    return;
  }
  engine_ = std::move(*engine);
  auto server = EngineServer::Start(
      engine_.get(), {.unix_socket_path = socket_path_, .tcp_address = "127.0.0.1:0"});
  if (!server.ok()) {
    ADD_FAILURE() << "the server did not start: " << server.status();
    return;
  }
  server_ = std::move(*server);
  if (!options_.manual_ticks) {
    loop_ = std::make_unique<TickLoop>(engine_.get(), options_.tick);
    loop_->Start();
  }
}

EngineFixture::~EngineFixture() { Stop(); }

void EngineFixture::Tick() {
  ASSERT_TRUE(options_.manual_ticks && engine_ != nullptr) << "Tick() needs manual_ticks";
  fake_clock_.Advance(options_.tick);
  engine_->RunTick();
}

void EngineFixture::Stop() {
  if (loop_) loop_->Stop();
  if (server_) server_->Shutdown(absl::Seconds(2));
}

std::unique_ptr<EngineClient> EngineFixture::Client(const std::string& address) const {
  auto client = EngineClient::Create(address, {.call_timeout = absl::Seconds(5)});
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

}  // namespace vigil::testing
