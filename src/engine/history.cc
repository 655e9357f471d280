// Implements HistoryStore.
#include "engine/history.h"

#include <algorithm>
#include <bit>

#include "common/check.h"

namespace vigil {
namespace {

constexpr uint64_t kSeqMask = (uint64_t{1} << 48) - 1;
constexpr int kStatusShift = 48;
constexpr uint64_t kInjectedBit = uint64_t{1} << 56;

}  // namespace

template <typename T>
bool HistoryStore::Ring<T>::push_back(T value) {
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
void HistoryStore::Ring<T>::pop_front() {
  VIGIL_CHECK(size_ > 0);
  slots_[head_] = T();
  head_ = (head_ + 1) % slots_.size();
  --size_;
}

HistoryStore::HistoryStore(uint32_t gpu_count, std::vector<FieldType> types,
                           std::vector<absl::Duration> intervals, absl::Duration max_age)
    : types_(std::move(types)), max_age_(max_age), series_(gpu_count * types_.size()) {
  VIGIL_CHECK(intervals.size() == types_.size());
  for (uint32_t gpu = 0; gpu < gpu_count; ++gpu) {
    for (size_t f = 0; f < types_.size(); ++f) {
      const size_t limit = static_cast<size_t>(max_age / intervals[f]) + 2;
      tick_limit_ = std::max(tick_limit_, limit);
      series(gpu, f).samples.set_limit(limit);
      series(gpu, f).strings.set_limit(limit);
    }
  }
}

void HistoryStore::BeginTick(uint64_t seq, absl::Time time) {
  VIGIL_CHECK(seq <= kSeqMask);
  if (tick_times_.empty()) {
    first_tick_seq_ = seq;
  } else {
    VIGIL_CHECK(seq == first_tick_seq_ + tick_times_.size());
  }
  tick_times_.push_back(time);
}

void HistoryStore::Append(uint32_t gpu, size_t field_index, const FieldValue& value) {
  VIGIL_CHECK(!tick_times_.empty());
  const uint64_t seq = first_tick_seq_ + tick_times_.size() - 1;
  Series& s = series(gpu, field_index);
  PackedSample sample{seq | (uint64_t{static_cast<uint8_t>(value.status)} << kStatusShift) |
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
        break;
    }
  }
  s.samples.push_back(sample);
  if (types_[field_index] == FieldType::kString) {
    s.strings.push_back(value.ok() ? std::get<std::string>(value.value) : std::string());
  }
}

void HistoryStore::Trim(absl::Time now) {
  const absl::Time cutoff = now - max_age_;
  while (!tick_times_.empty() &&
         (tick_times_.front() < cutoff || tick_times_.size() > tick_limit_)) {
    tick_times_.pop_front();
    ++first_tick_seq_;
  }
  for (Series& s : series_) {
    while (s.samples.size() > 0 && (s.samples[0].seq_and_flags & kSeqMask) < first_tick_seq_) {
      s.samples.pop_front();
      if (s.strings.size() > 0) s.strings.pop_front();
    }
  }
}

absl::Time HistoryStore::TickTime(uint64_t seq) const {
  VIGIL_CHECK(seq >= first_tick_seq_ && seq - first_tick_seq_ < tick_times_.size());
  return tick_times_[seq - first_tick_seq_];
}

std::pair<size_t, size_t> HistoryStore::Range(const Series& s, absl::Time start,
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
      if ((s.samples[mid].seq_and_flags & kSeqMask) < seq) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    return low;
  };
  return {first_at_or_after(seq_low), first_at_or_after(seq_high)};
}

FieldValue HistoryStore::Unpack(const Series& s, size_t position, FieldType type) const {
  const PackedSample& packed = s.samples[position];
  FieldValue value;
  value.status = static_cast<ValueStatus>((packed.seq_and_flags >> kStatusShift) & 0xff);
  value.injected = (packed.seq_and_flags & kInjectedBit) != 0;
  if (value.ok()) {
    switch (type) {
      case FieldType::kInt64:
        value.value = static_cast<int64_t>(packed.bits);
        break;
      case FieldType::kDouble:
        value.value = std::bit_cast<double>(packed.bits);
        break;
      case FieldType::kString:
        value.value = s.strings[position];
        break;
    }
  }
  return value;
}

void HistoryStore::Query(uint32_t gpu, size_t field_index, absl::Time start, absl::Time end,
                         size_t max_samples, std::vector<HistorySample>* out,
                         bool* truncated) const {
  const Series& s = series(gpu, field_index);
  auto [first, last] = Range(s, start, end);
  *truncated = last - first > max_samples;
  if (*truncated) first = last - max_samples;
  out->clear();
  out->reserve(last - first);
  for (size_t i = first; i < last; ++i) {
    const uint64_t seq = s.samples[i].seq_and_flags & kSeqMask;
    out->push_back({seq, TickTime(seq), Unpack(s, i, types_[field_index])});
  }
}

size_t HistoryStore::Count(uint32_t gpu, size_t field_index, absl::Time start,
                           absl::Time end) const {
  auto [first, last] = Range(series(gpu, field_index), start, end);
  return last - first;
}

size_t HistoryStore::sample_count() const {
  size_t count = 0;
  for (const Series& s : series_) count += s.samples.size();
  return count;
}

size_t HistoryStore::memory_bytes() const {
  size_t bytes = series_.capacity() * sizeof(Series) + tick_times_.size() * sizeof(absl::Time);
  for (const Series& s : series_) {
    bytes += s.samples.capacity() * sizeof(PackedSample);
    bytes += s.strings.capacity() * sizeof(std::string);
    for (size_t i = 0; i < s.strings.size(); ++i) bytes += s.strings[i].capacity();
  }
  return bytes;
}

}  // namespace vigil
