// Test support for the engine's tests: an EventListener that keeps every event it is given, so a
// test can say what the engine recorded (the audit trail), and a fixture of an engine on two
// simulated GPUs and a fake clock, its events recorded, driven tick by tick. Not thread-safe: the
// engine calls the recorder from the thread that records, which in these tests is the test's own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/sim_backend.h"
#include "engine/engine.h"
#include "gtest/gtest.h"

namespace vigil {

// Who the tests' privileged calls come from.
inline const Principal kTestRoot{
    .transport = "unix", .uid = 0, .pid = 42, .description = "uid 0 (root)"};

class RecordingEvents : public EventListener {
 public:
  void OnMessage(const EventPtr& event) override { events.push_back(event); }
  void OnStop(const absl::Status&) override {}
  // The kinds of every event, in order ("XID", "INJECTION_STARTED", ...).
  std::vector<std::string> Kinds() const {
    std::vector<std::string> kinds;
    for (const auto& event : events) kinds.emplace_back(EventKindName(event->kind));
    return kinds;
  }
  // The messages of the events of `kind`, in order.
  std::vector<std::string> Messages(EventKind kind) const {
    std::vector<std::string> messages;
    for (const auto& event : events) {
      if (event->kind == kind) messages.push_back(event->message);
    }
    return messages;
  }
  std::vector<EventPtr> events;
};

class SimEngineTest : public ::testing::Test {
 protected:
  // `ticks`: how many the engine has run when the test begins.
  void StartEngine(int ticks, const SimOptions& options = {.gpu_count = 2, .seed = 3}) {
    auto sim = SimBackend::Create(options);
    ASSERT_TRUE(sim.ok());
    sim_ = sim->get();
    auto engine = Engine::Create({.node_name = "n1", .clock = &clock_}, std::move(*sim));
    ASSERT_TRUE(engine.ok());
    engine_ = std::move(*engine);
    events_ = std::make_shared<RecordingEvents>();
    ASSERT_TRUE(engine_->WatchEvents(events_, 0).ok());
    Tick(ticks);
  }

  // One tick a second, as the tick loop would run them.
  void Tick(int count = 1) {
    for (int i = 0; i < count; ++i) {
      clock_.Advance(absl::Seconds(1));
      engine_->RunTick();
    }
  }

  FakeClock clock_;
  SimBackend* sim_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<RecordingEvents> events_;
};

}  // namespace vigil
