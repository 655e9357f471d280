// Implements the vigil.v1.Engine service and its stream reactors.
#include "server/service.h"

#include "api/convert.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "server/convert.h"
#include "server/tick_encoder.h"
#include "spdlog/spdlog.h"
#include "tls/peer.h"

namespace vigil {
namespace {

std::vector<uint32_t> Gpus(const google::protobuf::RepeatedField<uint32_t>& gpus) {
  return {gpus.begin(), gpus.end()};
}
std::vector<FieldId> Fields(const google::protobuf::RepeatedField<uint32_t>& fields) {
  return {fields.begin(), fields.end()};
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A stream that follows the engine's ticks: it joins the tick fan-out, starts with the latest
// snapshot (so the client has the full state at once), and leaves the fan-out when it ends. A
// slow client loses intermediate ticks, never the newest.
template <typename Wire>
class TickStreamReactor : public QueuedStreamReactor<SnapshotPtr, Wire> {
 public:
  using Base = QueuedStreamReactor<SnapshotPtr, Wire>;
  explicit TickStreamReactor(Engine* engine)
      : Base(engine->subscriber_queue_depth(), Base::Overflow::kDropOldest), engine_(engine) {}

  void Begin() {
    if (absl::Status added = engine_->SubscribeTicks(this->listener()); !added.ok()) {
      this->Stop(added.code() == absl::StatusCode::kFailedPrecondition
                     ? absl::UnavailableError(added.message())
                     : added);
      return;
    }
    this->Enqueue(engine_->Latest());
  }

 protected:
  void Unregister(const Listener<SnapshotPtr>* listener) override {
    engine_->UnsubscribeTicks(listener);
  }

  Engine* const engine_;
};

// One Subscribe stream, written as raw bytes so that subscribers with the same filter share one
// encoding per tick (TickEncoder).
class SubscribeReactor final : public TickStreamReactor<grpc::ByteBuffer> {
 public:
  SubscribeReactor(Engine* engine, TickEncoder* encoder, TickFilter filter)
      : TickStreamReactor(engine),
        encoder_(encoder),
        filter_(std::move(filter)),
        filter_key_(filter_.Key()) {}

 protected:
  uint64_t OrderOf(const SnapshotPtr& snapshot) const override { return snapshot->seq; }
  void Encode(const SnapshotPtr& snapshot, uint64_t dropped, grpc::ByteBuffer* wire) override {
    *wire = TickEncoder::Frame(encoder_->Encode(*snapshot, filter_, filter_key_), dropped);
  }

 private:
  TickEncoder* const encoder_;
  const TickFilter filter_;
  const std::string filter_key_;
};

// One WatchEvents stream: the recent backlog, then live events. Audit records must not vanish
// silently, so a client that falls more than the queue behind has its stream ended (it can
// reconnect asking for recent events) instead of losing some.
class EventsReactor final : public QueuedStreamReactor<EventPtr, v1::Event> {
 public:
  explicit EventsReactor(Engine* engine)
      : QueuedStreamReactor(EventLog::kRecentCapacity, Overflow::kEndStream), engine_(engine) {}

  void Begin(size_t recent) {
    if (absl::Status added = engine_->WatchEvents(listener(), recent); !added.ok()) {
      Stop(added.code() == absl::StatusCode::kFailedPrecondition
               ? absl::UnavailableError(added.message())
               : added);
    }
  }

 protected:
  uint64_t OrderOf(const EventPtr& event) const override { return event->id; }
  void Encode(const EventPtr& event, uint64_t, v1::Event* wire) override {
    wire->Clear();
    ToProto(*event, engine_->identity().instance_id, wire);
  }
  void Unregister(const Listener<EventPtr>* listener) override { engine_->UnwatchEvents(listener); }

 private:
  Engine* const engine_;
};

// One WatchHealth stream: the verdict of every tick (a full state, so a dropped tick loses
// nothing but that tick's transitions, which the event stream also carries).
class HealthReactor final : public TickStreamReactor<v1::HealthUpdate> {
 public:
  HealthReactor(Engine* engine, std::vector<uint32_t> gpus)
      : TickStreamReactor(engine), gpus_(std::move(gpus)) {}

 protected:
  uint64_t OrderOf(const SnapshotPtr& snapshot) const override {
    return snapshot->health != nullptr ? snapshot->seq : 0;
  }
  void Encode(const SnapshotPtr& snapshot, uint64_t, v1::HealthUpdate* wire) override {
    wire->Clear();
    wire->set_instance_id(engine_->identity().instance_id);
    wire->set_mig_generation(snapshot->mig->generation);
    ToProto(*snapshot->health, engine_->identity().instance_id, gpus_, wire->mutable_verdict());
    if (snapshot->health_transitions != nullptr) {
      for (const HealthTransition& transition : *snapshot->health_transitions) {
        if (gpus_.empty() || transition.node_level ||
            std::find(gpus_.begin(), gpus_.end(), transition.gpu) != gpus_.end()) {
          ToProto(transition, wire->add_transitions());
        }
      }
    }
  }

 private:
  const std::vector<uint32_t> gpus_;
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(MessageOf(status)));
}

grpc::ServerUnaryReactor* EngineService::GetEngineInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetEngineInfoRequest*,
                                                       v1::EngineInfo* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  const EngineIdentity& identity = engine_->identity();
  const auto latest = engine_->Latest();
  response->set_node_name(identity.node_name);
  response->set_instance_id(identity.instance_id);
  response->set_version(identity.version);
  response->set_backend(identity.backend);
  response->set_start_time_us(absl::ToUnixMicros(identity.start_time));
  response->set_seq(latest->seq);
  response->set_seq_time_us(latest->seq == 0 ? 0 : absl::ToUnixMicros(latest->time));
  response->set_tick_interval_us(absl::ToInt64Microseconds(identity.tick_interval));
  response->set_history_max_age_us(absl::ToInt64Microseconds(identity.history_max_age));
  response->set_gpu_count(static_cast<uint32_t>(engine_->gpus().size()));
  response->set_driver_version(engine_->gpus().front().driver_version);
  ToProto(engine_->Counters(), response->mutable_counters());
  response->set_last_tick_duration_us(static_cast<int64_t>(
      engine_->stats().last_tick_duration_ns.load(std::memory_order_relaxed) / 1000));
  for (const auto& [xid, rule] : engine_->config().health.xids) {
    ToProto(rule, /*known=*/true, &(*response->mutable_xid_policy())[xid]);
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::ListGpus(grpc::CallbackServerContext* context,
                                                  const v1::ListGpusRequest*,
                                                  v1::ListGpusResponse* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  response->set_instance_id(engine_->identity().instance_id);
  for (const NicPortEntity& port : engine_->NicPorts()) ToProto(port, response->add_nic_ports());
  const std::shared_ptr<const MigTable> mig = engine_->Mig();
  response->set_mig_generation(mig->generation);
  for (const GpuIdentity& gpu : engine_->gpus()) {
    v1::Gpu* out = response->add_gpus();
    out->set_index(gpu.index);
    out->set_uuid(gpu.uuid);
    out->set_name(gpu.name);
    out->set_pci_bus_id(gpu.pci_bus_id);
    out->set_serial(gpu.serial);
    out->set_memory_total_mib(gpu.memory_total_mib);
    out->set_driver_version(gpu.driver_version);
    out->set_device(gpu.device);
    const MigState& state = mig->gpus[gpu.index];
    out->set_mig_mode(state.mode);
    for (const MigInstance& instance : state.instances) {
      v1::MigInstance* mig = out->add_mig_instances();
      mig->set_gpu_instance_id(instance.gpu_instance_id);
      mig->set_compute_instance_id(instance.compute_instance_id);
      mig->set_profile(instance.profile);
      mig->set_uuid(instance.uuid);
      mig->set_placement_start(instance.placement_start);
      mig->set_placement_size(instance.placement_size);
      mig->set_memory_total_mib(instance.memory_total_mib);
    }
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::ListFields(grpc::CallbackServerContext* context,
                                                    const v1::ListFieldsRequest*,
                                                    v1::ListFieldsResponse* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  const FieldLayout& layout = engine_->layout();
  for (size_t i = 0; i < layout.size(); ++i) {
    const FieldInfo& field = layout.field(i);
    v1::FieldDescriptor* out = response->add_fields();
    out->set_id(field.id);
    out->set_name(std::string(field.name));
    for (std::string_view alias : {field.name_v46, field.legacy_name}) {
      if (!alias.empty()) out->add_aliases(std::string(alias));
    }
    out->set_type(ToProto(field.type));
    out->set_unit(std::string(field.unit));
    out->set_help(std::string(field.help));
    out->set_cumulative(field.cumulative);
    out->set_interval_us(absl::ToInt64Microseconds(engine_->interval(i)));
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::GetLatestValues(grpc::CallbackServerContext* context,
                                                         const v1::GetLatestValuesRequest* request,
                                                         v1::GetLatestValuesResponse* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  auto gpus = engine_->ResolveGpus(Gpus(request->gpus()));
  if (!gpus.ok()) return Finish(context, gpus.status());
  auto fields = engine_->ResolveFields(Fields(request->field_ids()));
  if (!fields.ok()) return Finish(context, fields.status());
  const auto latest = engine_->Latest();
  response->set_instance_id(engine_->identity().instance_id);
  response->set_seq(latest->seq);
  response->set_timestamp_us(latest->seq == 0 ? 0 : absl::ToUnixMicros(latest->time));
  AppendValues(*latest, *gpus, *fields, request->include_mig_instances(),
               response->mutable_values());
  AppendProcesses(*latest, *gpus, response->mutable_processes());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::GetHistory(grpc::CallbackServerContext* context,
                                                    const v1::GetHistoryRequest* request,
                                                    v1::GetHistoryResponse* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  if (request->start_time_us() < 0 || request->end_time_us() < 0) {
    return Finish(context, absl::InvalidArgumentError(
                               "history times are Unix microseconds and cannot be negative"));
  }
  HistoryRequest query{
      .gpus = Gpus(request->gpus()),
      .fields = Fields(request->field_ids()),
      .start = absl::FromUnixMicros(request->start_time_us()),
      .end = request->end_time_us() == 0 ? absl::InfiniteFuture()
                                         : absl::FromUnixMicros(request->end_time_us()),
      .max_samples = request->max_samples(),
      .include_mig_instances = request->include_mig_instances(),
  };
  auto history = engine_->History(query);
  if (!history.ok()) return Finish(context, history.status());
  response->set_instance_id(engine_->identity().instance_id);
  response->set_seq(engine_->Latest()->seq);
  for (const HistorySeries& series : *history) {
    v1::Series* out = response->add_series();
    out->set_gpu(series.gpu);
    if (series.gpu_instance) out->set_gpu_instance(*series.gpu_instance);
    out->set_field_id(series.field);
    out->set_truncated(series.truncated);
    out->mutable_samples()->Reserve(static_cast<int>(series.samples.size()));
    for (const HistorySample& sample : series.samples) {
      v1::Sample* s = out->add_samples();
      SetValue(sample.value, s);
      s->set_seq(sample.seq);
      s->set_timestamp_us(absl::ToUnixMicros(sample.time));
    }
  }
  return Finish(context, absl::OkStatus());
}

Caller EngineService::IdentifyCaller(grpc::CallbackServerContext* context) const {
  Caller caller;
  const std::string peer = context->peer();
  caller.peer = peer;
  if (peer.starts_with("fd:")) {
    // A connection the engine accepted on its Unix socket (see unix_listener.h).
    caller.transport = "unix";
    if (const auto fd = ParseInt64(std::string_view(peer).substr(3))) {
      caller.credentials = peers_->Lookup(static_cast<int>(*fd));
    }
  } else if (peer.starts_with("ipv4:") || peer.starts_with("ipv6:")) {
    caller.transport = "tcp";
    if (const std::shared_ptr<const grpc::AuthContext> auth = context->auth_context()) {
      caller.tls = tls::IsTls(*auth);
      caller.certificate = tls::PeerCertificateOf(*auth);
    }
  } else if (peer == "unknown") {
    caller.transport = "inproc";  // Server::InProcessChannel
  } else {
    caller.transport = "unknown";
  }
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    const std::string_view value(it->second.data(), it->second.size());
    if (value.starts_with("Bearer ")) caller.bearer_token = std::string(value.substr(7));
  }
  return caller;
}

absl::StatusOr<Principal> EngineService::Authorize(grpc::CallbackServerContext* context,
                                                   Permission permission) const {
  const Caller caller = IdentifyCaller(context);
  auto principal = authorizer_.Authorize(caller, permission);
  if (!principal.ok()) {
    spdlog::warn("refused a call to {} from {} ({}): {}", PermissionName(permission),
                 context->peer(), caller.transport, MessageOf(principal.status()));
  }
  return principal;
}

absl::Status EngineService::PermitRead(grpc::CallbackServerContext* context) {
  const Caller caller = IdentifyCaller(context);
  if (caller.transport != "tcp" || !caller.certificate) return absl::OkStatus();  // the cheap case
  auto principal = authorizer_.Authorize(caller, Permission::kRead);
  if (principal.ok()) return absl::OkStatus();
  const std::string identity = caller.certificate->Identity();
  bool first = false;
  {
    absl::MutexLock lock(&refused_readers_mutex_);
    first = refused_readers_.insert(identity).second;
  }
  if (first) {  // a client refused reads retries: say it once per certificate
    spdlog::warn("refused reads from {} ({}): {}", context->peer(), identity,
                 MessageOf(principal.status()));
  }
  return principal.status();
}

grpc::ServerUnaryReactor* EngineService::ListEvents(grpc::CallbackServerContext* context,
                                                    const v1::ListEventsRequest* request,
                                                    v1::ListEventsResponse* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  for (const EventPtr& event : engine_->RecentEvents(request->recent())) {
    ToProto(*event, engine_->identity().instance_id, response->add_events());
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::InjectField(grpc::CallbackServerContext* context,
                                                     const v1::InjectFieldRequest* request,
                                                     v1::Injection* response) {
  auto principal = Authorize(context, Permission::kInject);
  if (!principal.ok()) return Finish(context, principal.status());
  if (request->duration_us() < 0) {
    return Finish(context, absl::InvalidArgumentError("the duration cannot be negative"));
  }
  std::optional<double> value;
  std::optional<int64_t> add;
  switch (request->change_case()) {
    case v1::InjectFieldRequest::kValue:
      value = request->value();
      break;
    case v1::InjectFieldRequest::kAdd:
      add = request->add();
      break;
    default:
      return Finish(context, absl::InvalidArgumentError("give a value or an amount to add"));
  }
  const absl::Duration duration = absl::Microseconds(request->duration_us());
  absl::StatusOr<InjectionRecord> record;
  if (!request->nic_port().empty() || !request->port_field().empty()) {
    if (request->gpu() != 0 || request->field_id() != 0) {
      return Finish(context, absl::InvalidArgumentError(
                                 "name a GPU's field or a NIC port's field, not both"));
    }
    record = engine_->InjectPort({.port = request->nic_port(),
                                  .field = request->port_field(),
                                  .value = value,
                                  .add = add,
                                  .duration = duration,
                                  .allow_actions = request->allow_actions()},
                                 *principal);
  } else {
    record = engine_->InjectField({.gpu = request->gpu(),
                                   .field = request->field_id(),
                                   .value = value,
                                   .add = add,
                                   .duration = duration,
                                   .allow_actions = request->allow_actions()},
                                  *principal);
  }
  if (!record.ok()) return Finish(context, record.status());
  *response = ToProto(*record);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::InjectXid(grpc::CallbackServerContext* context,
                                                   const v1::InjectXidRequest* request,
                                                   v1::InjectXidResponse* response) {
  auto principal = Authorize(context, Permission::kInject);
  if (!principal.ok()) return Finish(context, principal.status());
  XidInjectionRequest injection{
      .gpu = request->gpu(), .xid = request->xid(), .allow_actions = request->allow_actions()};
  if (request->has_gpu_instance()) injection.gpu_instance = request->gpu_instance();
  auto record = engine_->InjectXid(injection, *principal);
  if (!record.ok()) return Finish(context, record.status());
  *response->mutable_injection() = ToProto(*record);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::RunScenario(grpc::CallbackServerContext* context,
                                                     const v1::RunScenarioRequest* request,
                                                     v1::Scenario* response) {
  auto principal = Authorize(context, Permission::kInject);
  if (!principal.ok()) return Finish(context, principal.status());
  if (request->yaml().size() > (1 << 20)) {
    return Finish(context, absl::InvalidArgumentError("the scenario is over 1 MiB"));
  }
  auto scenario = engine_->RunScenario(
      request->yaml(), request->source().empty() ? "scenario" : request->source(), *principal);
  if (!scenario.ok()) return Finish(context, scenario.status());
  *response = ToProto(*scenario);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::ClearInjections(grpc::CallbackServerContext* context,
                                                         const v1::ClearInjectionsRequest* request,
                                                         v1::ClearInjectionsResponse* response) {
  auto principal = Authorize(context, Permission::kInject);
  if (!principal.ok()) return Finish(context, principal.status());
  if (request->target_case() == v1::ClearInjectionsRequest::TARGET_NOT_SET ||
      (request->target_case() == v1::ClearInjectionsRequest::kAll && !request->all())) {
    return Finish(context, absl::InvalidArgumentError("say what to clear: an id, or all"));
  }
  auto cleared = engine_->Clear(request->id(), request->all(), *principal);
  if (!cleared.ok()) return Finish(context, cleared.status());
  for (const std::string& id : *cleared) response->add_cleared(id);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::ListInjections(grpc::CallbackServerContext* context,
                                                        const v1::ListInjectionsRequest*,
                                                        v1::ListInjectionsResponse* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  for (const InjectionRecord& record : engine_->Injections()) {
    *response->add_injections() = ToProto(record);
  }
  for (const ScenarioRun& scenario : engine_->Scenarios()) {
    *response->add_scenarios() = ToProto(scenario);
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::Event>* EngineService::WatchEvents(
    grpc::CallbackServerContext* context, const v1::WatchEventsRequest* request) {
  auto* reactor = new EventsReactor(engine_);
  if (absl::Status denied = PermitRead(context); !denied.ok()) {
    reactor->Stop(denied);
  } else {
    reactor->Begin(std::min<size_t>(request->recent(), EventLog::kRecentCapacity));
  }
  return reactor;
}

grpc::ServerUnaryReactor* EngineService::GetHealth(grpc::CallbackServerContext* context,
                                                   const v1::GetHealthRequest* request,
                                                   v1::HealthVerdict* response) {
  if (absl::Status denied = PermitRead(context); !denied.ok()) return Finish(context, denied);
  auto gpus = engine_->ResolveGpus(Gpus(request->gpus()));
  if (!gpus.ok()) return Finish(context, gpus.status());
  ToProto(*engine_->Health(), engine_->identity().instance_id,
          request->gpus().empty() ? std::vector<uint32_t>{} : *gpus, response);
  return Finish(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::HealthUpdate>* EngineService::WatchHealth(
    grpc::CallbackServerContext* context, const v1::WatchHealthRequest* request) {
  auto gpus = engine_->ResolveGpus(Gpus(request->gpus()));
  auto* reactor = new HealthReactor(
      engine_, gpus.ok() && !request->gpus().empty() ? *gpus : std::vector<uint32_t>{});
  if (absl::Status denied = PermitRead(context); !denied.ok()) {
    reactor->Stop(denied);
  } else if (!gpus.ok()) {
    reactor->Stop(gpus.status());
  } else {
    reactor->Begin();
  }
  return reactor;
}

grpc::ServerUnaryReactor* EngineService::ClearHealth(grpc::CallbackServerContext* context,
                                                     const v1::ClearHealthRequest* request,
                                                     v1::ClearHealthResponse* response) {
  auto principal = Authorize(context, Permission::kClear);
  if (!principal.ok()) return Finish(context, principal.status());
  std::optional<HealthSystem> system;
  if (!request->system().empty()) {
    system = ParseHealthSystem(request->system());
    if (!system) {
      return Finish(context, absl::InvalidArgumentError(fmt::format(
                                 "unknown health system '{}': use {} (a GPU's) or nvswitch (the "
                                 "node's)",
                                 request->system(), HealthSystemChoices())));
    }
  }
  auto cleared = engine_->ClearHealth(
      request->node() ? std::nullopt : std::optional<uint32_t>(request->gpu()), system, *principal);
  if (!cleared.ok()) return Finish(context, cleared.status());
  for (const Incident& incident : *cleared) ToProto(incident, response->add_cleared());
  return Finish(context, absl::OkStatus());
}

EngineService::~EngineService() {
  std::thread worker;
  {
    // Joined outside the lock: the worker takes it to say it is done.
    absl::MutexLock lock(&reset_mutex_);
    worker = std::move(reset_worker_);
  }
  if (worker.joinable()) worker.join();
}

grpc::ServerUnaryReactor* EngineService::ResetGpu(grpc::CallbackServerContext* context,
                                                  const v1::ResetGpuRequest* request,
                                                  v1::ResetGpuResponse* response) {
  auto principal = Authorize(context, Permission::kReset);
  if (!principal.ok()) return Finish(context, principal.status());
  if (request->reason().size() > 1024) {
    return Finish(context, absl::InvalidArgumentError("the reason is over 1024 characters"));
  }
  absl::MutexLock lock(&reset_mutex_);
  if (reset_running_) {
    return Finish(context, absl::AbortedError(
                               "another GPU reset is running on this engine: try again after it"));
  }
  if (reset_worker_.joinable()) reset_worker_.join();  // the previous one, finished
  reset_running_ = true;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reset_worker_ = StartNamedThread("vigil-gpu-reset", [this, reactor, request, response,
                                                       principal = *principal] {
    auto result = engine_->ResetGpu(request->gpu(), request->uuid(), request->reason(), principal);
    if (result.ok()) {
      response->set_gpu(result->gpu);
      response->set_uuid(result->uuid);
      response->set_duration_us(absl::ToInt64Microseconds(result->took));
      response->set_output(result->output);
      for (const std::string& id : result->injections_cleared) {
        response->add_injections_cleared(id);
      }
    }
    {
      absl::MutexLock done(&reset_mutex_);
      reset_running_ = false;
    }
    reactor->Finish(ToGrpcStatus(result.status()));
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* EngineService::Subscribe(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request) {
  v1::SubscribeRequest request;
  grpc::ByteBuffer copy(*raw_request);  // Deserialize takes a mutable buffer; this is a ref-copy
  const bool parsed =
      grpc::SerializationTraits<v1::SubscribeRequest>::Deserialize(&copy, &request).ok();
  auto gpus = engine_->ResolveGpus(Gpus(request.gpus()));
  auto fields = engine_->ResolveFields(Fields(request.field_ids()));
  auto* reactor = new SubscribeReactor(
      engine_, &encoder_,
      {gpus.ok() ? *gpus : std::vector<uint32_t>{}, fields.ok() ? *fields : std::vector<size_t>{},
       request.include_health(), request.include_mig_instances()});
  if (absl::Status denied = PermitRead(context); !denied.ok()) {
    reactor->Stop(denied);
  } else if (!parsed) {
    reactor->Stop(absl::InvalidArgumentError("the SubscribeRequest could not be parsed"));
  } else if (!gpus.ok() || !fields.ok()) {
    reactor->Stop(!gpus.ok() ? gpus.status() : fields.status());
  } else {
    reactor->Begin();
  }
  return reactor;
}

}  // namespace vigil
