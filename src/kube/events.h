// Events about a Node, as the kubelet and controllers post them (core/v1 Event, involvedObject the
// Node): the object of a new Event, so every Vigil component writes the same shape. Pure
// functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace vigil::kube {

struct NodeEventFields {
  std::string name;       // the Event object's name, unique in its namespace
  std::string ns;         // where it goes ("default", where the kubelet puts Node events)
  std::string node;       // the Node it is about
  std::string node_uid;   // "" when unknown
  std::string_view type;  // "Normal" or "Warning"
  std::string_view reason;
  std::string message;
  std::string_view component;  // "vigil-healthcheck", "vigil-remediator"
  std::string instance;        // the reporting instance (node name, pod name)
  absl::Time time;
};

// The Event with count 1, first and last seen at `time`.
nlohmann::json NodeEvent(const NodeEventFields& fields);

}  // namespace vigil::kube
