// Implements the vigil.v1.Engine service and its subscription stream reactor.
#include "engine/service.h"

#include "common/status.h"
#include "engine/proto_convert.h"
#include "engine/tick_encoder.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

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

// One Subscribe stream, written as raw bytes so that subscribers with the same filter share one
// encoding per tick (TickEncoder). Lifetime: created by Subscribe(), deleted in OnDone() when gRPC
// is done with it. The fan-out holds a Listener (shared_ptr) that forwards ticks here while
// attached.
//
// Locking: `mutex_` guards the queue and the write/finish state. StartWrite() and Finish() are
// never called with `mutex_` held (gRPC may run OnWriteDone on another thread at once); instead
// the thread that sets writing_ or finished_ under the lock owns that action. Finish() is only
// called with no write in flight, so OnDone() cannot run while a write is being started.
class SubscribeReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  SubscribeReactor(Engine* engine, TickEncoder* encoder, TickFilter filter)
      : engine_(engine),
        encoder_(encoder),
        filter_(std::move(filter)),
        filter_key_(filter_.Key()),
        queue_(engine->subscriber_queue_depth()) {}

  void Begin() {
    listener_ = std::make_shared<Listener>(this);
    if (absl::Status added = engine_->fanout().Add(listener_); !added.ok()) {
      listener_->Detach();
      Stop(added.code() == absl::StatusCode::kFailedPrecondition
               ? absl::UnavailableError(added.message())
               : added);
      return;
    }
    // Start with the latest snapshot, so the subscriber has the full state at once.
    Enqueue(engine_->Latest());
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      if (!ok && !end_status_) {
        end_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    Advance();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mutex_);
      if (!end_status_) end_status_ = grpc::Status::CANCELLED;
    }
    Advance();
  }

  void OnDone() override {
    if (listener_ != nullptr) {  // null when the request was refused before subscribing
      engine_->fanout().Remove(listener_.get());
      listener_->Detach();  // waits for an OnTick in progress
    }
    delete this;
  }

  void Enqueue(const std::shared_ptr<const Snapshot>& snapshot) {
    {
      absl::MutexLock lock(&mutex_);
      // The latest snapshot and the first fanned-out tick may be the same one.
      if (snapshot->seq == 0 || snapshot->seq <= last_enqueued_seq_) return;
      last_enqueued_seq_ = snapshot->seq;
      queue_.Push(snapshot);
    }
    Advance();
  }

  void Stop(const absl::Status& status) {
    {
      absl::MutexLock lock(&mutex_);
      if (!end_status_) end_status_ = ToGrpcStatus(status);
    }
    Advance();
  }

 private:
  // Forwards the fan-out's calls to the reactor until Detach().
  class Listener final : public TickListener {
   public:
    explicit Listener(SubscribeReactor* reactor) : reactor_(reactor) {}
    void OnMessage(const SnapshotPtr& snapshot) override {
      absl::MutexLock lock(&mutex_);
      if (reactor_ != nullptr) reactor_->Enqueue(snapshot);
    }
    void OnStop(const absl::Status& status) override {
      absl::MutexLock lock(&mutex_);
      if (reactor_ != nullptr) reactor_->Stop(status);
    }
    void Detach() {
      absl::MutexLock lock(&mutex_);
      reactor_ = nullptr;
    }

   private:
    absl::Mutex mutex_;
    SubscribeReactor* reactor_ ABSL_GUARDED_BY(mutex_);
  };

  // Starts the next write, or finishes the stream, if nothing is in flight.
  void Advance() {
    std::shared_ptr<const Snapshot> next;
    uint64_t dropped = 0;
    grpc::Status finish_status;
    {
      absl::MutexLock lock(&mutex_);
      if (writing_ || finished_) return;
      if (end_status_) {
        finished_ = true;
        finish_status = *end_status_;
      } else {
        if (queue_.empty()) return;
        next = queue_.Pop();
        writing_ = true;
        dropped = queue_.dropped();
      }
    }
    if (next == nullptr) {
      Finish(finish_status);
      return;
    }
    // Owned by this thread until OnWriteDone: gRPC reads it during the write.
    buffer_ = TickEncoder::Frame(encoder_->Encode(*next, filter_, filter_key_), dropped);
    StartWrite(&buffer_);
  }

  Engine* const engine_;
  TickEncoder* const encoder_;
  const TickFilter filter_;
  const std::string filter_key_;
  std::shared_ptr<Listener> listener_;
  grpc::ByteBuffer buffer_;  // owned by whoever set writing_

  absl::Mutex mutex_;
  BoundedQueue<SnapshotPtr> queue_ ABSL_GUARDED_BY(mutex_);
  uint64_t last_enqueued_seq_ ABSL_GUARDED_BY(mutex_) = 0;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  std::optional<grpc::Status> end_status_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(MessageOf(status)));
}

grpc::ServerUnaryReactor* EngineService::GetEngineInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetEngineInfoRequest*,
                                                       v1::EngineInfo* response) {
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
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::ListGpus(grpc::CallbackServerContext* context,
                                                  const v1::ListGpusRequest*,
                                                  v1::ListGpusResponse* response) {
  response->set_instance_id(engine_->identity().instance_id);
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
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::ListFields(grpc::CallbackServerContext* context,
                                                    const v1::ListFieldsRequest*,
                                                    v1::ListFieldsResponse* response) {
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
  auto gpus = engine_->ResolveGpus(Gpus(request->gpus()));
  if (!gpus.ok()) return Finish(context, gpus.status());
  auto fields = engine_->ResolveFields(Fields(request->field_ids()));
  if (!fields.ok()) return Finish(context, fields.status());
  const auto latest = engine_->Latest();
  response->set_instance_id(engine_->identity().instance_id);
  response->set_seq(latest->seq);
  response->set_timestamp_us(latest->seq == 0 ? 0 : absl::ToUnixMicros(latest->time));
  AppendValues(*latest, *gpus, *fields, response->mutable_values());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EngineService::GetHistory(grpc::CallbackServerContext* context,
                                                    const v1::GetHistoryRequest* request,
                                                    v1::GetHistoryResponse* response) {
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
  };
  auto history = engine_->History(query);
  if (!history.ok()) return Finish(context, history.status());
  response->set_instance_id(engine_->identity().instance_id);
  response->set_seq(engine_->Latest()->seq);
  for (const HistorySeries& series : *history) {
    v1::Series* out = response->add_series();
    out->set_gpu(series.gpu);
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

grpc::ServerWriteReactor<grpc::ByteBuffer>* EngineService::Subscribe(
    grpc::CallbackServerContext*, const grpc::ByteBuffer* raw_request) {
  v1::SubscribeRequest request;
  grpc::ByteBuffer copy(*raw_request);  // Deserialize takes a mutable buffer; this is a ref-copy
  const bool parsed =
      grpc::SerializationTraits<v1::SubscribeRequest>::Deserialize(&copy, &request).ok();
  auto gpus = engine_->ResolveGpus(Gpus(request.gpus()));
  auto fields = engine_->ResolveFields(Fields(request.field_ids()));
  auto* reactor = new SubscribeReactor(
      engine_, &encoder_,
      {gpus.ok() ? *gpus : std::vector<uint32_t>{}, fields.ok() ? *fields : std::vector<size_t>{}});
  if (!parsed) {
    reactor->Stop(absl::InvalidArgumentError("the SubscribeRequest could not be parsed"));
  } else if (!gpus.ok() || !fields.ok()) {
    reactor->Stop(!gpus.ok() ? gpus.status() : fields.status());
  } else {
    reactor->Begin();
  }
  return reactor;
}

}  // namespace vigil
