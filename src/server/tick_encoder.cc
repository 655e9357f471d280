// Implements TickEncoder.
#include "server/tick_encoder.h"

#include "api/convert.h"
#include "server/convert.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {
namespace {

// TickUpdate.dropped_ticks: field 5, wire type 0 (varint).
constexpr uint8_t kDroppedTicksTag = (5 << 3) | 0;

void ReleaseBody(void* user_data) {
  delete static_cast<std::shared_ptr<const std::string>*>(user_data);
}

}  // namespace

std::string TickFilter::Key() const {
  std::string key;
  key.reserve((gpus.size() + fields.size()) * 4 + 1);
  for (uint32_t gpu : gpus) key.append(reinterpret_cast<const char*>(&gpu), sizeof(gpu));
  key.push_back(include_health ? 'H' : '|');
  key.push_back(include_mig_instances ? 'M' : '|');
  for (size_t field : fields) {
    const uint32_t index = static_cast<uint32_t>(field);
    key.append(reinterpret_cast<const char*>(&index), sizeof(index));
  }
  return key;
}

std::shared_ptr<const std::string> TickEncoder::Encode(const Snapshot& snapshot,
                                                       const TickFilter& filter,
                                                       const std::string& filter_key) {
  {
    absl::MutexLock lock(&mutex_);
    auto it = cache_.find(filter_key);
    if (it != cache_.end() && it->second.seq == snapshot.seq) return it->second.body;
  }
  // Encode outside the lock; two threads racing on a new tick both encode, one result is kept.
  v1::TickUpdate update;
  update.set_instance_id(instance_id_);
  update.set_seq(snapshot.seq);
  update.set_timestamp_us(absl::ToUnixMicros(snapshot.time));
  AppendValues(snapshot, filter.gpus, filter.fields, filter.include_mig_instances,
               update.mutable_values());
  update.set_mig_generation(snapshot.mig != nullptr ? snapshot.mig->generation : 0);
  ToProto(snapshot.counters, update.mutable_counters());
  if (snapshot.nic_ports != nullptr) {
    for (const NicPortEntity& port : *snapshot.nic_ports) ToProto(port, update.add_nic_ports());
  }
  AppendProcesses(snapshot, filter.gpus, update.mutable_processes());
  if (filter.include_health && snapshot.health != nullptr) {
    ToProto(*snapshot.health, instance_id_, filter.gpus, update.mutable_health());
  }
  auto body = std::make_shared<const std::string>(update.SerializeAsString());
  absl::MutexLock lock(&mutex_);
  if (cache_.size() >= kMaxFilters && cache_.find(filter_key) == cache_.end()) cache_.clear();
  Entry& entry = cache_[filter_key];
  if (entry.seq <= snapshot.seq) entry = Entry{snapshot.seq, body};
  return body;
}

grpc::ByteBuffer TickEncoder::Frame(std::shared_ptr<const std::string> body,
                                    uint64_t dropped_ticks) {
  const std::string* bytes = body.get();
  // The slice refers to the shared body without copying it and keeps it alive until gRPC is done.
  grpc::Slice slices[2] = {grpc::Slice(const_cast<char*>(bytes->data()), bytes->size(), ReleaseBody,
                                       new std::shared_ptr<const std::string>(std::move(body))),
                           grpc::Slice()};
  if (dropped_ticks == 0) return grpc::ByteBuffer(slices, 1);
  char tail[11];
  size_t size = 0;
  tail[size++] = static_cast<char>(kDroppedTicksTag);
  do {
    uint8_t byte = dropped_ticks & 0x7f;
    dropped_ticks >>= 7;
    if (dropped_ticks != 0) byte |= 0x80;
    tail[size++] = static_cast<char>(byte);
  } while (dropped_ticks != 0);
  slices[1] = grpc::Slice(tail, size);
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace vigil
