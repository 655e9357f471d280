// The client library every engine client uses (CLI, exporter, health check): connects by
// --engine address, makes calls with deadlines, follows streams across engine restarts, and
// turns gRPC failures into messages that say what to do. FromGrpc (subscription.h): UNAVAILABLE
// becomes "the engine at ADDR is unreachable: ...", DEADLINE_EXCEEDED "did not answer in time";
// other codes keep the engine's message, which already says what was wrong.
// Thread-safety: EngineClient's calls are thread-safe; see subscription.h for streams.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/address.h"
#include "client/subscription.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "tls/credentials.h"
#include "vigil/v1/engine.grpc.pb.h"

namespace vigil {

struct ClientOptions {
  absl::Duration call_timeout = absl::Seconds(5);
  // Sent as "authorization: Bearer TOKEN" for injection over TCP; empty: none.
  std::string token;
  // TLS to the engine's TCP listener: used when enabled, or when the address is tls://.
  tls::ClientTlsOptions tls;
  // The longest gRPC waits between attempts to reach an engine that is away. The engine is on
  // this node, so an attempt costs a connect() and a restarted engine should be found within
  // this much of its start (docs/architecture.md, "Coming back after a restart").
  absl::Duration reconnect_backoff_max = absl::Milliseconds(500);
  // Times the subscriptions' reopen backoff; not owned.
  Clock* clock = Clock::Real();
};

using TickSubscription = Subscription<v1::TickUpdate>;
using EventSubscription = Subscription<v1::Event>;
using HealthSubscription = Subscription<v1::HealthUpdate>;

// An event stream reopened after a disconnect gets the `recent` backlog again: the events of
// the same engine instance a reader has already seen. Tells them apart from new ones by id (ids
// increase per instance), and says when the instance changed (a restarted engine's backlog is
// all new). Not thread-safe: one per reader of a stream.
class ReplayedEvents {
 public:
  struct Seen {
    bool fresh = false;         // not seen before: act on it
    bool new_instance = false;  // the first event of another engine instance
  };
  Seen See(const v1::Event& event) {
    Seen seen;
    if (event.instance_id() != instance_) {
      instance_ = event.instance_id();
      last_id_ = 0;
      seen.new_instance = true;
    }
    seen.fresh = event.id() > last_id_;
    if (seen.fresh) last_id_ = event.id();
    return seen;
  }

 private:
  std::string instance_;
  uint64_t last_id_ = 0;
};

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

  // Streams that reconnect by themselves (see subscription.h).
  std::unique_ptr<TickSubscription> Subscribe(v1::SubscribeRequest request);
  std::unique_ptr<EventSubscription> WatchEvents(v1::WatchEventsRequest request);
  absl::StatusOr<v1::ListEventsResponse> ListEvents(const v1::ListEventsRequest& request);

  // Fault injection; the engine authorises these (PERMISSION_DENIED says how to be allowed).
  absl::StatusOr<v1::Injection> InjectField(const v1::InjectFieldRequest& request);
  absl::StatusOr<v1::InjectXidResponse> InjectXid(const v1::InjectXidRequest& request);
  absl::StatusOr<v1::Scenario> RunScenario(const v1::RunScenarioRequest& request);
  absl::StatusOr<v1::ClearInjectionsResponse> ClearInjections(
      const v1::ClearInjectionsRequest& request);
  absl::StatusOr<v1::ListInjectionsResponse> ListInjections();

  absl::StatusOr<v1::HealthVerdict> GetHealth(const v1::GetHealthRequest& request);
  std::unique_ptr<HealthSubscription> WatchHealth(v1::WatchHealthRequest request);
  absl::StatusOr<v1::ClearHealthResponse> ClearHealth(const v1::ClearHealthRequest& request);
  // Returns when the reset is done: give the client a timeout longer than the engine's reset
  // command limit (2 minutes by default).
  absl::StatusOr<v1::ResetGpuResponse> ResetGpu(const v1::ResetGpuRequest& request);

 private:
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Engine::Stub> stub_;
  std::string display_;
  ClientOptions options_;
};

}  // namespace vigil
