// Implements the pod UID cache over the informer.
#include "kube/pod_uids.h"

#include "kube/object.h"

namespace vigil::kube {

using Json = nlohmann::json;

PodUids::PodUids(std::shared_ptr<KubeApi> api, const std::string& node, Clock* clock)
    : api_(std::move(api)),
      informer_(
          api_.get(),
          InformerOptions{.path = "/api/v1/pods",
                          .field_selector = "spec.nodeName=" + node,
                          // A pod's spec and status are kilobytes; the label needs three strings.
                          .transform =
                              [](const Json& pod) {
                                const Json& metadata = At(pod, "metadata");
                                return Json{
                                    {"metadata",
                                     {{"namespace", StringAt(metadata, "namespace")},
                                      {"name", StringAt(metadata, "name")},
                                      {"uid", StringAt(metadata, "uid")},
                                      {"resourceVersion", StringAt(metadata, "resourceVersion")}}}};
                              },
                          .description = "pods of node " + node,
                          .clock = clock}) {}

std::string PodUids::UidOf(const std::string& ns, const std::string& name) const {
  std::optional<Json> pod = informer_.Get(ns + "/" + name);
  return pod.has_value() ? StringAt(At(*pod, "metadata"), "uid") : "";
}

}  // namespace vigil::kube
