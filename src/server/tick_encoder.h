// Encodes subscription messages once per tick and filter, however many subscribers share them.
// Most subscribers ask for the same thing (every value, or the exporter's fields), so encoding
// each tick separately per subscriber would cost the tick thread time linear in subscribers. The
// shared encoding is a serialized v1::TickUpdate without `dropped_ticks`; each subscriber's
// message is that body plus its own `dropped_ticks`, appended as one more wire-format field
// (protobuf parsers merge concatenated fields), with no copy of the body.
// Thread-safety: Encode() may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "sampling/snapshot.h"

namespace vigil {

// Which values a subscriber receives: GPUs and field indexes, in order.
struct TickFilter {
  std::vector<uint32_t> gpus;
  std::vector<size_t> fields;
  bool include_health = false;
  bool include_mig_instances = false;
  std::string Key() const;
};

class TickEncoder {
 public:
  explicit TickEncoder(std::string instance_id) : instance_id_(std::move(instance_id)) {}

  // The serialized update for `snapshot` under `filter`; `filter_key` is filter.Key().
  std::shared_ptr<const std::string> Encode(const Snapshot& snapshot, const TickFilter& filter,
                                            const std::string& filter_key);

  // The wire message for one subscriber: `body` followed by dropped_ticks (when non-zero).
  static grpc::ByteBuffer Frame(std::shared_ptr<const std::string> body, uint64_t dropped_ticks);

 private:
  struct Entry {
    uint64_t seq = 0;
    std::shared_ptr<const std::string> body;
  };
  // Distinct filters remembered; past this, the cache starts over (filters are few in practice).
  static constexpr size_t kMaxFilters = 64;

  const std::string instance_id_;
  absl::Mutex mutex_;
  std::unordered_map<std::string, Entry> cache_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil
