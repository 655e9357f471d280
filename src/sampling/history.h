// Bounded, compressed per-(entity, field) sample history: what GetHistory serves, a day of it in a
// few MiB. Memory is bounded twice: by age (samples older than max_age are dropped at every tick,
// a whole block at a time, and never served) and by count (a series serves at most
// max_age / interval + 2 samples, whatever the clock does).
//
// Encoding (Gorilla, VLDB 2015, adapted): each series is a chain of blocks of up to
// kBlockSamples samples; a block is a bit stream that decodes on its own. A sample's time is not
// stored but looked up in one shared table of tick times (every sample of a tick shares the
// tick's time); its seq is stored as delta-of-delta (one bit while the series keeps its
// interval); its status and injected flag as an exception (one bit while they stay as they
// were); an int64 as the zig-zag residual from a prediction (the previous value, or the previous
// value plus the previous delta while that predicted better: a counter's steady rate), 1 bit
// when it is exact; a double that is a decimal of up to six places (687.045 W) as its scaled
// integer the same way, any other double as the XOR with the previous value (1 bit when equal,
// else its meaningful bits inside the previous window, or a new window); a string as an index
// into the block's own dictionary (1 bit while it stays the same).
//
// Readers: Read() takes, under the owner's lock, only the sealed blocks' pointers, a copy of the
// open block (at most one block's bits) and the tick table's chunk pointers; the Snapshot decodes
// without the lock. Sealed blocks and tick entries already written are never modified, so a
// Snapshot stays valid while the store goes on (tick chunks are written only past what any
// snapshot can read).
// Not thread-safe otherwise: the engine serialises writers and Read() with its own lock.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fields/value.h"

namespace vigil {

struct HistorySample {
  uint64_t seq = 0;
  absl::Time time;
  FieldValue value;
};

class HistoryStore {
 public:
  // Samples per block: a block is sealed (immutable, shared with readers) once it holds this many.
  static constexpr uint32_t kBlockSamples = 1024;
  // Tick times per chunk of the shared tick table.
  static constexpr uint32_t kTickChunk = 4096;

  // types[i] and intervals[i] describe field index i; every GPU has one series per field.
  HistoryStore(uint32_t gpu_count, std::vector<FieldType> types,
               std::vector<absl::Duration> intervals, absl::Duration max_age);
  ~HistoryStore();
  HistoryStore(HistoryStore&&) noexcept;
  HistoryStore& operator=(HistoryStore&&) noexcept;

  // Entities (the `gpu` of the calls below) beyond the constructor's: another one with empty
  // series, sharing the store's tick table (its index is returned); ClearEntity empties one, for
  // reuse by another entity. MIG instances come and go this way.
  uint32_t AddEntity();
  void ClearEntity(uint32_t entity);
  uint32_t entity_count() const { return entities_; }

  // Starts tick `seq` at `time`. Precondition: seq is the last tick's seq + 1 (or any seq for the
  // first tick, or after every tick was trimmed).
  void BeginTick(uint64_t seq, absl::Time time);
  // Appends a sample of the current tick. Precondition: BeginTick was called, and this series
  // has no sample for this tick yet.
  void Append(uint32_t gpu, size_t field_index, const FieldValue& value);
  // Drops ticks older than now - max_age and beyond the count bound, and the blocks that hold no
  // sample a reader may still see.
  void Trim(absl::Time now);

  struct Block;
  struct TickChunk;
  // One series' samples with start <= time <= end, as of the Read() that made it. Decoding needs
  // no lock; a Snapshot may outlive further appends, trims and the store's entity clears.
  class Snapshot {
   public:
    Snapshot();
    ~Snapshot();
    Snapshot(Snapshot&&) noexcept;
    Snapshot& operator=(Snapshot&&) noexcept;
    // How many samples match (before truncation).
    size_t Count() const;
    // The matching samples, oldest first; when more than max_samples match, only the newest
    // max_samples and *truncated is set.
    void Decode(size_t max_samples, std::vector<HistorySample>* out, bool* truncated) const;

   private:
    friend class HistoryStore;
    // Calls visit(seq, value) for every matching sample in order.
    template <typename Visit>
    void ForEach(Visit&& visit) const;
    absl::Time TimeOf(uint64_t seq) const;

    FieldType type_ = FieldType::kInt64;
    uint64_t seq_low_ = 0, seq_high_ = 0;  // [low, high)
    uint64_t min_ordinal_ = 0;             // the count bound: older samples are not served
    std::vector<std::shared_ptr<const Block>> blocks_;
    std::vector<std::shared_ptr<const TickChunk>> ticks_;
    uint64_t ticks_first_seq_ = 0;  // seq of ticks_[0]->times[0]
  };
  // Precondition: the caller holds the lock that serialises it with the writer.
  Snapshot Read(uint32_t gpu, size_t field_index, absl::Time start, absl::Time end) const;

  // Read() then Decode() / Count(), for callers that decode under their lock anyway.
  void Query(uint32_t gpu, size_t field_index, absl::Time start, absl::Time end, size_t max_samples,
             std::vector<HistorySample>* out, bool* truncated) const {
    Read(gpu, field_index, start, end).Decode(max_samples, out, truncated);
  }
  size_t Count(uint32_t gpu, size_t field_index, absl::Time start, absl::Time end) const {
    return Read(gpu, field_index, start, end).Count();
  }

  // Samples a reader can see, over every series.
  size_t sample_count() const;
  // Bytes of the encoded bit streams (sealed and open blocks, rounded up to whole words).
  size_t encoded_bytes() const;
  // Heap bytes held by the store (capacity, not just size), block headers included.
  size_t memory_bytes() const;
  // Blocks sealed so far (for tests of the block boundaries).
  size_t sealed_blocks() const;

 private:
  struct Series;

  Series& series(uint32_t gpu, size_t field_index);
  const Series& series(uint32_t gpu, size_t field_index) const;
  uint64_t next_seq() const { return first_tick_seq_ + tick_count_; }
  absl::Time TickTime(uint64_t seq) const;
  // The first retained seq whose tick time is >= time (or > time with `after`); next_seq() when
  // none.
  uint64_t FirstTickAt(absl::Time time, bool after) const;
  void Seal(Series& s);
  uint64_t MinOrdinal(const Series& s, size_t field_index) const;

  std::vector<FieldType> types_;
  std::vector<size_t> limits_;  // per field index: the most samples a series serves
  absl::Duration max_age_;
  uint32_t entities_ = 0;
  std::vector<Series> series_;  // entities_ x types_.size()
  // The tick table: chunks of kTickChunk times; the tick of seq s is at
  // tick_chunks_[(s - chunks_first_seq_) / kTickChunk]. Retained: [first_tick_seq_, next_seq()).
  std::deque<std::shared_ptr<TickChunk>> tick_chunks_;
  uint64_t chunks_first_seq_ = 0;
  uint64_t first_tick_seq_ = 0;
  uint64_t tick_count_ = 0;
  size_t tick_limit_ = 0;  // the largest series limit: no served sample refers to an older tick
};

}  // namespace vigil
