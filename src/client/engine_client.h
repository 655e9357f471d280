// The client library every engine client uses (CLI, exporter, health check): connects by
// --engine address, makes calls with deadlines, follows subscriptions across engine restarts,
// and turns gRPC failures into messages that say what to do.
// Thread-safety: EngineClient's calls are thread-safe. A TickSubscription is read by one thread;
// its Cancel() may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/address.h"
#include "client/backoff.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "vigil/v1/engine.grpc.pb.h"

namespace vigil {

struct ClientOptions {
  absl::Duration call_timeout = absl::Seconds(5);
};

// grpc::Status -> absl::Status with a message for people: UNAVAILABLE becomes "the engine at
// ADDR is unreachable: ...", DEADLINE_EXCEEDED "did not answer within ...". Other codes keep the
// server's message, which already says what was wrong.
absl::Status FromGrpc(const grpc::Status& status, const std::string& address);

class TickSubscription;

class EngineClient {
 public:
  // Validates the address; does not connect yet (gRPC connects on the first call).
  static absl::StatusOr<std::unique_ptr<EngineClient>> Create(std::string_view address,
                                                              ClientOptions options = {});
  // A client over an existing channel (e.g. an in-process one); `display` names it in messages.
  EngineClient(std::shared_ptr<grpc::Channel> channel, std::string display,
               ClientOptions options = {});

  const std::string& address() const { return display_; }

  absl::StatusOr<v1::EngineInfo> GetEngineInfo();
  absl::StatusOr<v1::ListGpusResponse> ListGpus();
  absl::StatusOr<v1::ListFieldsResponse> ListFields();
  absl::StatusOr<v1::GetLatestValuesResponse> GetLatestValues(
      const v1::GetLatestValuesRequest& request);
  absl::StatusOr<v1::GetHistoryResponse> GetHistory(const v1::GetHistoryRequest& request);

  // Opens a subscription that reconnects by itself (see TickSubscription).
  std::unique_ptr<TickSubscription> Subscribe(v1::SubscribeRequest request);

 private:
  friend class TickSubscription;
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Engine::Stub> stub_;
  std::string display_;
  ClientOptions options_;
};

// A stream of ticks that survives engine restarts. Next() blocks for the next event:
// - kTick: `update` points to the update, valid until the next call to Next() (the message is
//   reused, so a subscriber does not allocate per tick); `new_instance` is true on the first update
//   from an engine instance other than the previous one (the engine restarted: caches were rebuilt,
//   seq started again).
// - kDisconnected: the stream broke or could not be opened; `error` says why. The next Next()
//   waits a backoff delay and reconnects.
// - kRejected: the engine refused the request (bad GPU or field): retrying cannot help.
// - kCancelled: Cancel() was called.
class TickSubscription {
 public:
  struct Event {
    enum Kind { kTick, kDisconnected, kRejected, kCancelled } kind = kCancelled;
    const v1::TickUpdate* update = nullptr;
    bool new_instance = false;
    absl::Status error;
  };

  TickSubscription(EngineClient* client, v1::SubscribeRequest request);
  ~TickSubscription();

  Event Next();
  // Wakes Next() and makes it return kCancelled from now on. Thread-safe.
  void Cancel();

  // Reconnect attempts so far.
  uint64_t reconnects() const { return reconnects_; }

 private:
  void CloseStream();

  EngineClient* const client_;
  const v1::SubscribeRequest request_;
  Backoff backoff_;
  std::string last_instance_id_;
  bool connected_before_ = false;
  bool waiting_to_reconnect_ = false;
  uint64_t reconnects_ = 0;
  std::unique_ptr<grpc::ClientReader<v1::TickUpdate>> reader_;
  v1::TickUpdate update_;  // reused for every message

  absl::Mutex mutex_;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  std::unique_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil
