// Implements the Node Event object (events.h).
#include "kube/events.h"

#include "kube/object.h"

namespace vigil::kube {

nlohmann::json NodeEvent(const NodeEventFields& fields) {
  const std::string time = Time(fields.time);
  nlohmann::json involved = {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", fields.node}};
  if (!fields.node_uid.empty()) involved["uid"] = fields.node_uid;
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", fields.name}, {"namespace", fields.ns}}},
          {"involvedObject", std::move(involved)},
          {"reason", fields.reason},
          {"message", fields.message},
          {"type", fields.type},
          {"source", {{"component", fields.component}, {"host", fields.instance}}},
          {"reportingComponent", fields.component},
          {"reportingInstance", fields.instance},
          {"firstTimestamp", time},
          {"lastTimestamp", time},
          {"count", 1}};
}

}  // namespace vigil::kube
