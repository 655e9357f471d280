// Implements PackedHistoryStore, the reference for HistoryStore.
#include "reference/packed_history.h"

#include <algorithm>
#include <bit>

#include "common/check.h"

namespace vigil {
namespace {

constexpr int kStatusShift = PackedHistoryStore::kDefaultOffsetBits;
constexpr uint32_t kStatusMask = 0xf;
constexpr uint32_t kInjectedBit = uint32_t{1} << 31;
static_assert(static_cast<uint32_t>(ValueStatus::kNoData) <= kStatusMask);

}  // namespace

template <typename T>
bool PackedHistoryStore::Ring<T>::push_back(T value) {
  if (size_ == slots_.size() && size_ < limit_) {
    // Grow: unroll into a new vector twice the size (bounded by the limit).
    std::vector<T> grown;
    grown.reserve(std::min(limit_, std::max<size_t>(4, slots_.size() * 2)));
    for (size_t i = 0; i < size_; ++i) grown.push_back(std::move(slots_[(head_ + i) % size_]));
    grown.resize(grown.capacity());
    slots_ = std::move(grown);
    head_ = 0;
  }
  if (size_ == slots_.size()) {  // at the limit: overwrite the oldest
    slots_[head_] = std::move(value);
    head_ = (head_ + 1) % slots_.size();
    return false;
  }
  slots_[(head_ + size_) % slots_.size()] = std::move(value);
  ++size_;
  return true;
}

template <typename T>
void PackedHistoryStore::Ring<T>::pop_front() {
  VIGIL_CHECK(size_ > 0);
  slots_[head_] = T();
  head_ = (head_ + 1) % slots_.size();
  --size_;
}

PackedHistoryStore::PackedHistoryStore(uint32_t gpu_count, std::vector<FieldType> types,
                                       std::vector<absl::Duration> intervals,
                                       absl::Duration max_age, uint32_t offset_bits)
    : types_(std::move(types)),
      max_age_(max_age),
      offset_mask_((uint32_t{1} << offset_bits) - 1),
      series_(gpu_count * types_.size()) {
  VIGIL_CHECK(offset_bits >= 1 && offset_bits <= kDefaultOffsetBits);
  VIGIL_CHECK(intervals.size() == types_.size());
  for (size_t f = 0; f < types_.size(); ++f) {
    const size_t limit = static_cast<size_t>(max_age / intervals[f]) + 2;
    tick_limit_ = std::max(tick_limit_, limit);
    // A series spans at most `limit` ticks, so its offsets always fit after a rebase.
    VIGIL_CHECK(limit < offset_mask_);
    limits_.push_back(limit);
  }
  for (uint32_t gpu = 0; gpu < gpu_count; ++gpu) ClearEntity(gpu);
}

uint32_t PackedHistoryStore::AddEntity() {
  const uint32_t entity = entity_count();
  series_.resize(series_.size() + types_.size());
  ClearEntity(entity);
  return entity;
}

void PackedHistoryStore::ClearEntity(uint32_t entity) {
  VIGIL_CHECK(entity < entity_count());
  for (size_t f = 0; f < types_.size(); ++f) {
    Series& s = series(entity, f);
    s = Series{};
    s.samples.set_limit(limits_[f]);
  }
}

void PackedHistoryStore::BeginTick(uint64_t seq, absl::Time time) {
  if (tick_times_.empty()) {
    first_tick_seq_ = seq;
  } else {
    VIGIL_CHECK(seq == first_tick_seq_ + tick_times_.size());
  }
  tick_times_.push_back(time);
}

uint64_t PackedHistoryStore::SeqOf(const Series& s, size_t position) const {
  return s.base_seq + (s.samples[position].meta & offset_mask_);
}

void PackedHistoryStore::Rebase(Series& s) const {
  if (s.samples.size() == 0) return;
  const uint64_t new_base = SeqOf(s, 0);
  const uint32_t shift = static_cast<uint32_t>(new_base - s.base_seq);
  for (size_t i = 0; i < s.samples.size(); ++i) {
    PackedSample& sample = s.samples[i];
    sample.meta = (sample.meta & ~offset_mask_) | ((sample.meta & offset_mask_) - shift);
  }
  s.base_seq = new_base;
}

uint64_t PackedHistoryStore::Intern(Series& s, const std::string& text) {
  for (size_t i = 0; i < s.dictionary.size(); ++i) {
    if (s.dictionary[i] == text) return i;
  }
  if (s.dictionary.size() >= s.dictionary_limit) {
    // Keep only the strings samples still refer to, renumbered in order of first use.
    std::vector<std::string> live;
    std::vector<int64_t> renumber(s.dictionary.size(), -1);
    for (size_t i = 0; i < s.samples.size(); ++i) {
      PackedSample& sample = s.samples[i];
      if (static_cast<ValueStatus>((sample.meta >> kStatusShift) & kStatusMask) !=
          ValueStatus::kOk) {
        continue;
      }
      int64_t& index = renumber[sample.bits];
      if (index < 0) {
        index = static_cast<int64_t>(live.size());
        live.push_back(std::move(s.dictionary[sample.bits]));
      }
      sample.bits = static_cast<uint64_t>(index);
    }
    s.dictionary = std::move(live);
    // A series whose string changes every sample compacts rarely: the limit grows with it.
    s.dictionary_limit = std::max<size_t>(16, 2 * s.dictionary.size());
  }
  s.dictionary.push_back(text);
  return s.dictionary.size() - 1;
}

void PackedHistoryStore::Append(uint32_t gpu, size_t field_index, const FieldValue& value) {
  VIGIL_CHECK(!tick_times_.empty());
  const uint64_t seq = first_tick_seq_ + tick_times_.size() - 1;
  Series& s = series(gpu, field_index);
  if (s.samples.size() == 0) s.base_seq = seq;
  VIGIL_CHECK(seq >= s.base_seq);
  if (seq - s.base_seq > offset_mask_) Rebase(s);
  VIGIL_CHECK(seq - s.base_seq <= offset_mask_);
  PackedSample sample{static_cast<uint32_t>(seq - s.base_seq) |
                          (static_cast<uint32_t>(value.status) << kStatusShift) |
                          (value.injected ? kInjectedBit : 0),
                      0};
  if (value.ok()) {
    switch (types_[field_index]) {
      case FieldType::kInt64:
        sample.bits = static_cast<uint64_t>(std::get<int64_t>(value.value));
        break;
      case FieldType::kDouble:
        sample.bits = std::bit_cast<uint64_t>(std::get<double>(value.value));
        break;
      case FieldType::kString:
        sample.bits = Intern(s, std::get<std::string>(value.value));
        break;
    }
  }
  s.samples.push_back(sample);
}

void PackedHistoryStore::Trim(absl::Time now) {
  const absl::Time cutoff = now - max_age_;
  while (!tick_times_.empty() &&
         (tick_times_.front() < cutoff || tick_times_.size() > tick_limit_)) {
    tick_times_.pop_front();
    ++first_tick_seq_;
  }
  for (Series& s : series_) {
    while (s.samples.size() > 0 && SeqOf(s, 0) < first_tick_seq_) s.samples.pop_front();
  }
}

absl::Time PackedHistoryStore::TickTime(uint64_t seq) const {
  VIGIL_CHECK(seq >= first_tick_seq_ && seq - first_tick_seq_ < tick_times_.size());
  return tick_times_[seq - first_tick_seq_];
}

std::pair<size_t, size_t> PackedHistoryStore::Range(const Series& s, absl::Time start,
                                                    absl::Time end) const {
  if (tick_times_.empty() || start > end) return {0, 0};
  // Tick times only grow within the table (a clock step back shows up as equal or earlier
  // times, which binary search tolerates by returning some consistent split).
  const auto low_tick = std::lower_bound(tick_times_.begin(), tick_times_.end(), start);
  const auto high_tick = std::upper_bound(tick_times_.begin(), tick_times_.end(), end);
  if (low_tick >= high_tick) return {0, 0};
  const uint64_t seq_low = first_tick_seq_ + (low_tick - tick_times_.begin());
  const uint64_t seq_high = first_tick_seq_ + (high_tick - tick_times_.begin());  // exclusive
  auto first_at_or_after = [&](uint64_t seq) {
    size_t low = 0, high = s.samples.size();
    while (low < high) {
      const size_t mid = (low + high) / 2;
      if (SeqOf(s, mid) < seq) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    return low;
  };
  return {first_at_or_after(seq_low), first_at_or_after(seq_high)};
}

FieldValue PackedHistoryStore::Unpack(const Series& s, size_t position, FieldType type) const {
  const PackedSample& packed = s.samples[position];
  FieldValue value;
  value.status = static_cast<ValueStatus>((packed.meta >> kStatusShift) & kStatusMask);
  value.injected = (packed.meta & kInjectedBit) != 0;
  if (value.ok()) {
    switch (type) {
      case FieldType::kInt64:
        value.value = static_cast<int64_t>(packed.bits);
        break;
      case FieldType::kDouble:
        value.value = std::bit_cast<double>(packed.bits);
        break;
      case FieldType::kString:
        value.value = s.dictionary[packed.bits];
        break;
    }
  }
  return value;
}

void PackedHistoryStore::Query(uint32_t gpu, size_t field_index, absl::Time start, absl::Time end,
                               size_t max_samples, std::vector<HistorySample>* out,
                               bool* truncated) const {
  const Series& s = series(gpu, field_index);
  auto [first, last] = Range(s, start, end);
  *truncated = last - first > max_samples;
  if (*truncated) first = last - max_samples;
  out->clear();
  out->reserve(last - first);
  for (size_t i = first; i < last; ++i) {
    const uint64_t seq = SeqOf(s, i);
    out->push_back({seq, TickTime(seq), Unpack(s, i, types_[field_index])});
  }
}

size_t PackedHistoryStore::Count(uint32_t gpu, size_t field_index, absl::Time start,
                                 absl::Time end) const {
  auto [first, last] = Range(series(gpu, field_index), start, end);
  return last - first;
}

size_t PackedHistoryStore::sample_count() const {
  size_t count = 0;
  for (const Series& s : series_) count += s.samples.size();
  return count;
}

size_t PackedHistoryStore::memory_bytes() const {
  size_t bytes = series_.capacity() * sizeof(Series) + tick_times_.size() * sizeof(absl::Time);
  for (const Series& s : series_) {
    bytes += s.samples.capacity() * sizeof(PackedSample);
    bytes += s.dictionary.capacity() * sizeof(std::string);
    for (const std::string& text : s.dictionary) bytes += text.capacity();
  }
  return bytes;
}

}  // namespace vigil
