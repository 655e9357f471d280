// Test support for the engine's tests: an EventListener that keeps every event it is given, so a
// test can say what the engine recorded (the audit trail). Not thread-safe: the engine calls it
// from the thread that records, which in these tests is the test's own.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"

namespace vigil {

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

}  // namespace vigil
