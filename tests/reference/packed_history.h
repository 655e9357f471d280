// The history store as it was before compression (12 bytes a sample), kept as the reference that
// HistoryStore's equivalence test and benchmarks compare against; nothing in the engine uses it.
// Bounded per-(GPU, field) sample history. Memory is bounded twice: by
// age (samples older than max_age are dropped at every tick) and by count (a series never holds
// more than max_age / interval + 2 samples, whatever the clock does).
//
// Layout: a sample is 12 bytes — 32 bits of metadata (the tick seq as an offset from the series'
// base seq, the status, the injected flag) and the value's 64 bits. Its time is not stored per
// sample but looked up in one shared table of tick times, since every sample of a tick shares the
// tick's time. String values (identity fields, which almost never change) are stored once each in
// a small per-series dictionary, and a sample holds its index.
// Not thread-safe: the engine serialises writers and readers with its own lock.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fields/value.h"
#include "sampling/history.h"

namespace vigil {

class PackedHistoryStore {
 public:
  // types[i] and intervals[i] describe field index i; every GPU has one series per field.
  // offset_bits: width of a sample's seq offset; tests make it small to exercise rebasing.
  PackedHistoryStore(uint32_t gpu_count, std::vector<FieldType> types,
                     std::vector<absl::Duration> intervals, absl::Duration max_age,
                     uint32_t offset_bits = kDefaultOffsetBits);

  static constexpr uint32_t kDefaultOffsetBits = 27;

  // Entities (the `gpu` of the calls below) beyond the constructor's: another one with empty
  // series, sharing the store's tick table (its index is returned); ClearEntity empties one, for
  // reuse by another entity. MIG instances come and go this way.
  uint32_t AddEntity();
  void ClearEntity(uint32_t entity);
  uint32_t entity_count() const {
    return types_.empty() ? 0 : static_cast<uint32_t>(series_.size() / types_.size());
  }

  // Starts tick `seq` at `time`. Precondition: seq greater than every earlier seq.
  void BeginTick(uint64_t seq, absl::Time time);
  // Appends a sample of the current tick. Precondition: BeginTick was called, and this series
  // has no sample for this tick yet.
  void Append(uint32_t gpu, size_t field_index, const FieldValue& value);
  // Drops samples and ticks older than now - max_age, and ticks beyond the count bound.
  void Trim(absl::Time now);

  // The samples of one series with start <= time <= end, oldest first. When more than
  // max_samples match, only the newest max_samples are returned and *truncated is set.
  void Query(uint32_t gpu, size_t field_index, absl::Time start, absl::Time end, size_t max_samples,
             std::vector<HistorySample>* out, bool* truncated) const;
  // How many samples Query would match before truncation.
  size_t Count(uint32_t gpu, size_t field_index, absl::Time start, absl::Time end) const;

  size_t sample_count() const;
  // Distinct strings a string series holds in its dictionary.
  size_t strings_held(uint32_t gpu, size_t field_index) const {
    return series(gpu, field_index).dictionary.size();
  }
  // Heap bytes held by the store (capacity, not just size).
  size_t memory_bytes() const;

 private:
  struct __attribute__((packed, aligned(4))) PackedSample {
    uint32_t meta;  // injected bit 31, status bits 27-30, seq - base_seq in the low offset_bits
    uint64_t bits;  // int64 or double bits; the dictionary index for strings
  };
  static_assert(sizeof(PackedSample) == 12);
  // A ring buffer that grows by doubling up to `limit` entries, then overwrites the oldest.
  template <typename T>
  class Ring {
   public:
    void set_limit(size_t limit) { limit_ = limit; }
    size_t size() const { return size_; }
    size_t capacity() const { return slots_.capacity(); }
    const T& operator[](size_t i) const { return slots_[(head_ + i) % slots_.size()]; }
    T& operator[](size_t i) { return slots_[(head_ + i) % slots_.size()]; }
    // Returns false when the ring was full and the oldest entry was overwritten.
    bool push_back(T value);
    void pop_front();

   private:
    std::vector<T> slots_;
    size_t head_ = 0, size_ = 0, limit_ = SIZE_MAX;
  };
  struct Series {
    Ring<PackedSample> samples;
    uint64_t base_seq = 0;                // seq of offset 0
    std::vector<std::string> dictionary;  // string fields only: the distinct values held
    size_t dictionary_limit = 16;         // compact the dictionary when it grows past this
  };

  Series& series(uint32_t gpu, size_t field_index) {
    return series_[gpu * types_.size() + field_index];
  }
  const Series& series(uint32_t gpu, size_t field_index) const {
    return series_[gpu * types_.size() + field_index];
  }
  // [first, last) positions in `s` of samples with seq in [seq_low, seq_high].
  std::pair<size_t, size_t> Range(const Series& s, absl::Time start, absl::Time end) const;
  absl::Time TickTime(uint64_t seq) const;
  uint64_t SeqOf(const Series& s, size_t position) const;
  // Makes the oldest sample the base again, so new offsets fit in their bits.
  void Rebase(Series& s) const;
  // Index of `text` in the series' dictionary, adding it (and compacting) as needed.
  static uint64_t Intern(Series& s, const std::string& text);
  FieldValue Unpack(const Series& s, size_t position, FieldType type) const;

  std::vector<FieldType> types_;
  std::vector<size_t> limits_;  // per field index: the most samples a series holds
  absl::Duration max_age_;
  uint32_t offset_mask_;
  std::vector<Series> series_;
  // Times of retained ticks: tick_times_[i] is the time of seq first_tick_seq_ + i.
  std::deque<absl::Time> tick_times_;
  uint64_t first_tick_seq_ = 0;
  size_t tick_limit_ = 0;  // the largest series limit: no sample refers to an older tick
};

}  // namespace vigil
