// A kubelet's pod-resources API (v1 List) for end-to-end tests: serves a fixed answer on a Unix
// socket, as the real kubelet serves /var/lib/kubelet/pod-resources/kubelet.sock.
// Thread-safety: List() runs on gRPC's threads; set the answer before Serve(), except through
// RemovePod(), which takes the answer's lock.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/server_builder.h"
#include "k8s/podresources/v1/api.grpc.pb.h"

namespace vigil::testing {

class FakeKubelet final : public ::v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* response) override {
    ++calls;
    std::lock_guard lock(mutex_);
    *response = answer;
    return grpc::Status::OK;
  }

  // Pod `ns`/`name` is gone (it ended): the kubelet lists it no more. Safe while serving.
  void RemovePod(const std::string& ns, const std::string& name) {
    std::lock_guard lock(mutex_);
    auto* pods = answer.mutable_pod_resources();
    for (int i = pods->size() - 1; i >= 0; --i) {
      if (pods->Get(i).namespace_() == ns && pods->Get(i).name() == name)
        pods->DeleteSubrange(i, 1);
    }
  }

  // Container `container` of pod `ns`/`name` holds the GPUs `uuids` (nvidia.com/gpu).
  void AddPod(const std::string& ns, const std::string& name, const std::string& container,
              const std::vector<std::string>& uuids) {
    auto* pod = answer.add_pod_resources();
    pod->set_name(name);
    pod->set_namespace_(ns);
    auto* holder = pod->add_containers();
    holder->set_name(container);
    if (uuids.empty()) return;
    auto* devices = holder->add_devices();
    devices->set_resource_name("nvidia.com/gpu");
    for (const std::string& uuid : uuids) devices->add_device_ids(uuid);
  }

  // Container `container` of pod `ns`/`name` holds the MIG devices `ids` of resource `resource`
  // (nvidia.com/mig-1g.10gb under the device plugin's mixed strategy).
  void AddMigPod(const std::string& ns, const std::string& name, const std::string& container,
                 const std::string& resource, const std::vector<std::string>& ids) {
    AddPod(ns, name, container, {});
    auto* devices = answer.mutable_pod_resources()->rbegin()->mutable_containers(0)->add_devices();
    devices->set_resource_name(resource);
    for (const std::string& id : ids) devices->add_device_ids(id);
  }

  // Container `container` of pod `ns`/`name` holds device `device` of DRA driver `driver`'s pool
  // `pool` through ResourceClaim `claim` (pod-resources' dynamic_resources, Kubernetes 1.34+).
  void AddClaimPod(const std::string& ns, const std::string& name, const std::string& container,
                   const std::string& claim, const std::string& driver, const std::string& pool,
                   const std::string& device) {
    AddPod(ns, name, container, {});
    auto* dynamic =
        answer.mutable_pod_resources()->rbegin()->mutable_containers(0)->add_dynamic_resources();
    dynamic->set_claim_name(claim);
    dynamic->set_claim_namespace(ns);
    auto* resource = dynamic->add_claim_resources();
    resource->set_driver_name(driver);
    resource->set_pool_name(pool);
    resource->set_device_name(device);
    resource->add_cdi_devices()->set_name(driver + "/gpu=" + device);
  }

  // Serves on `socket`; false when it cannot.
  bool Serve(const std::string& socket) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return server_ != nullptr;
  }

  // Goes away, as a kubelet that stops.
  void Stop() {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  std::atomic<int> calls{0};
  ::v1::ListPodResourcesResponse answer;

 private:
  std::unique_ptr<grpc::Server> server_;
  std::mutex mutex_;  // guards `answer` once serving
};

}  // namespace vigil::testing
