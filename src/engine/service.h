// The vigil.v1.Engine gRPC service: the API edge of the engine. Translates requests into Engine
// calls and absl::Status into grpc::Status; holds no state of its own beyond live streams.
// Uses gRPC's callback API so that a subscription costs no thread: each stream is a reactor fed
// by the engine's fan-out.
// Thread-safety: handlers run on gRPC's threads; the Engine is thread-safe.
#pragma once

#include "engine/engine.h"
#include "engine/tick_encoder.h"
#include "vigil/v1/engine.grpc.pb.h"

namespace vigil {

// Subscribe is a raw (ByteBuffer) method so that one encoding per tick serves every subscriber
// with the same filter; the other methods are typed.
class EngineService final
    : public v1::Engine::WithRawCallbackMethod_Subscribe<v1::Engine::CallbackService> {
 public:
  explicit EngineService(Engine* engine)
      : engine_(engine), encoder_(engine->identity().instance_id) {}

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

 private:
  Engine* const engine_;
  TickEncoder encoder_;
};

// absl::Status -> grpc::Status, same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace vigil
