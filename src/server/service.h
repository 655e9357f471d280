// The vigil.v1.Engine gRPC service: the API edge of the engine. Translates requests into Engine
// calls and absl::Status into grpc::Status; holds no state of its own beyond live streams.
// Uses gRPC's callback API so that a subscription costs no thread: each stream is a reactor fed
// by the engine's fan-out.
// Thread-safety: handlers run on gRPC's threads; the Engine is thread-safe. A GPU reset, which
// may take a minute, runs on the service's one reset worker thread (`vigil-gpu-reset`), not on
// gRPC's: one at a time, joined by the next reset or the destructor.
#pragma once

#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "server/authz.h"
#include "server/stream_reactor.h"
#include "server/tick_encoder.h"
#include "server/unix_listener.h"
#include "vigil/v1/engine.grpc.pb.h"

namespace vigil {

// Subscribe is a raw (ByteBuffer) method so that one encoding per tick serves every subscriber
// with the same filter; the other methods are typed.
class EngineService final
    : public v1::Engine::WithRawCallbackMethod_Subscribe<v1::Engine::CallbackService> {
 public:
  // `peers` (not owned, outlives the service) identifies Unix socket callers for `authorizer`.
  EngineService(Engine* engine, const PeerRegistry* peers, Authorizer authorizer)
      : engine_(engine),
        peers_(peers),
        authorizer_(std::move(authorizer)),
        encoder_(engine->identity().instance_id) {}
  ~EngineService() override;

  grpc::ServerUnaryReactor* GetEngineInfo(grpc::CallbackServerContext* context,
                                          const v1::GetEngineInfoRequest* request,
                                          v1::EngineInfo* response) override;
  grpc::ServerUnaryReactor* ListGpus(grpc::CallbackServerContext* context,
                                     const v1::ListGpusRequest* request,
                                     v1::ListGpusResponse* response) override;
  grpc::ServerUnaryReactor* ListFields(grpc::CallbackServerContext* context,
                                       const v1::ListFieldsRequest* request,
                                       v1::ListFieldsResponse* response) override;
  grpc::ServerUnaryReactor* GetLatestValues(grpc::CallbackServerContext* context,
                                            const v1::GetLatestValuesRequest* request,
                                            v1::GetLatestValuesResponse* response) override;
  grpc::ServerUnaryReactor* GetHistory(grpc::CallbackServerContext* context,
                                       const v1::GetHistoryRequest* request,
                                       v1::GetHistoryResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request) override;
  grpc::ServerWriteReactor<v1::Event>* WatchEvents(grpc::CallbackServerContext* context,
                                                   const v1::WatchEventsRequest* request) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* context,
                                       const v1::ListEventsRequest* request,
                                       v1::ListEventsResponse* response) override;
  grpc::ServerUnaryReactor* InjectField(grpc::CallbackServerContext* context,
                                        const v1::InjectFieldRequest* request,
                                        v1::Injection* response) override;
  grpc::ServerUnaryReactor* InjectXid(grpc::CallbackServerContext* context,
                                      const v1::InjectXidRequest* request,
                                      v1::InjectXidResponse* response) override;
  grpc::ServerUnaryReactor* RunScenario(grpc::CallbackServerContext* context,
                                        const v1::RunScenarioRequest* request,
                                        v1::Scenario* response) override;
  grpc::ServerUnaryReactor* ClearInjections(grpc::CallbackServerContext* context,
                                            const v1::ClearInjectionsRequest* request,
                                            v1::ClearInjectionsResponse* response) override;
  grpc::ServerUnaryReactor* ListInjections(grpc::CallbackServerContext* context,
                                           const v1::ListInjectionsRequest* request,
                                           v1::ListInjectionsResponse* response) override;
  grpc::ServerUnaryReactor* GetHealth(grpc::CallbackServerContext* context,
                                      const v1::GetHealthRequest* request,
                                      v1::HealthVerdict* response) override;
  grpc::ServerWriteReactor<v1::HealthUpdate>* WatchHealth(
      grpc::CallbackServerContext* context, const v1::WatchHealthRequest* request) override;
  grpc::ServerUnaryReactor* ClearHealth(grpc::CallbackServerContext* context,
                                        const v1::ClearHealthRequest* request,
                                        v1::ClearHealthResponse* response) override;
  grpc::ServerUnaryReactor* ResetGpu(grpc::CallbackServerContext* context,
                                     const v1::ResetGpuRequest* request,
                                     v1::ResetGpuResponse* response) override;

 private:
  // Who is calling, from the transport (peer) and the authorization metadata.
  Caller IdentifyCaller(grpc::CallbackServerContext* context) const;
  // Who the caller is if it may do `permission` (a refusal is logged).
  absl::StatusOr<Principal> Authorize(grpc::CallbackServerContext* context,
                                      Permission permission) const;
  // OK where the caller may read: always but for a client certificate the engine config's
  // tls_clients does not grant `read` (a refusal is logged once per certificate).
  absl::Status PermitRead(grpc::CallbackServerContext* context);

  Engine* const engine_;
  const PeerRegistry* const peers_;
  const Authorizer authorizer_;
  TickEncoder encoder_;
  absl::Mutex reset_mutex_;
  std::thread reset_worker_ ABSL_GUARDED_BY(reset_mutex_);
  bool reset_running_ ABSL_GUARDED_BY(reset_mutex_) = false;
  // A leaf: nothing else is locked under it, and nothing is logged while it is held.
  absl::Mutex refused_readers_mutex_;
  std::set<std::string> refused_readers_ ABSL_GUARDED_BY(refused_readers_mutex_);
};

}  // namespace vigil
