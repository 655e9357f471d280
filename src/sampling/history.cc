// Implements HistoryStore: the bit streams, the blocks and the shared tick table.
#include "sampling/history.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>

#include "common/check.h"

namespace vigil {
namespace {

constexpr uint32_t kMetaBits = 5;  // status (4 bits), injected (bit 4)
static_assert(static_cast<uint32_t>(ValueStatus::kNoData) < 16);
constexpr uint32_t kStringIndexBits = 10;
static_assert(HistoryStore::kBlockSamples <= (1u << kStringIndexBits));

uint8_t MetaOf(const FieldValue& value) {
  return static_cast<uint8_t>(static_cast<uint8_t>(value.status) | (value.injected ? 16 : 0));
}

uint64_t ZigZag(uint64_t delta) {
  const int64_t d = static_cast<int64_t>(delta);
  return (static_cast<uint64_t>(d) << 1) ^ static_cast<uint64_t>(d >> 63);
}
uint64_t UnZigZag(uint64_t z) { return (z >> 1) ^ (~(z & 1) + 1); }

// Appends bits to a stream of 64-bit words, least significant bit first.
class BitWriter {
 public:
  BitWriter(std::vector<uint64_t>* words, uint64_t* bits) : words_(words), bits_(bits) {}
  // Precondition: 1 <= n <= 64 and value < 2^n.
  void Put(uint64_t value, uint32_t n) {
    const uint32_t offset = *bits_ & 63;
    if (offset == 0) {
      words_->push_back(value);
    } else {
      words_->back() |= value << offset;
      if (offset + n > 64) words_->push_back(value >> (64 - offset));
    }
    *bits_ += n;
  }
  void Bit(bool bit) { Put(bit ? 1 : 0, 1); }
  // 7 bits at a time, each group after the first announced by a 1 bit.
  void Varint(uint64_t value) {
    Put(value & 0x7f, 7);
    value >>= 7;
    while (value != 0) {
      Bit(true);
      Put(value & 0x7f, 7);
      value >>= 7;
    }
    Bit(false);
  }

 private:
  std::vector<uint64_t>* words_;
  uint64_t* bits_;
};

class BitReader {
 public:
  explicit BitReader(const uint64_t* words) : words_(words) {}
  uint64_t Get(uint32_t n) {
    const uint64_t word = position_ >> 6;
    const uint32_t offset = position_ & 63;
    uint64_t value = words_[word] >> offset;
    if (offset + n > 64) value |= words_[word + 1] << (64 - offset);
    position_ += n;
    return n == 64 ? value : value & ((uint64_t{1} << n) - 1);
  }
  bool Bit() { return Get(1) != 0; }
  uint64_t Varint() {
    uint64_t value = Get(7);
    for (uint32_t shift = 7; Bit(); shift += 7) value |= Get(7) << shift;
    return value;
  }

 private:
  const uint64_t* words_;
  uint64_t position_ = 0;
};

// A zig-zag residual: '0' for zero, else a unary width class and the payload — 6, 13, 20, 27,
// 34, 44 or 64 bits (temperatures and clocks fit the first, byte rates of tens of GB/s the 34).
constexpr uint32_t kResidualWidths[] = {6, 13, 20, 27, 34, 44, 64};
void PutResidual(BitWriter& out, uint64_t z) {
  if (z == 0) {
    out.Bit(false);
    return;
  }
  for (size_t i = 0; i < std::size(kResidualWidths); ++i) {
    const uint32_t width = kResidualWidths[i];
    if (width == 64 || z < (uint64_t{1} << width)) {
      // i + 1 one bits, then a zero unless this is the last class.
      // '1', then i more '1's, then a '0' unless this is the widest class.
      const bool widest = i + 1 == std::size(kResidualWidths);
      out.Put((uint64_t{1} << (i + 1)) - 1, static_cast<uint32_t>(widest ? i + 1 : i + 2));
      out.Put(z, width);
      return;
    }
  }
}
uint64_t GetResidual(BitReader& in) {
  if (!in.Bit()) return 0;
  size_t i = 0;
  while (i + 1 < std::size(kResidualWidths) && in.Bit()) ++i;
  return in.Get(kResidualWidths[i]);
}

// Predicts an integer series from its last value, or from its last value and delta while that
// did better (a counter's steady rate: the delta of deltas stays small). Encoder and decoder
// update it alike, so the choice costs no bits.
struct IntPredictor {
  uint64_t value = 0, delta = 0;
  bool of_deltas = false;
  uint64_t Predicted() const { return value + (of_deltas ? delta : 0); }
  void Update(uint64_t next) {
    const uint64_t d = next - value;
    of_deltas = ZigZag(d - delta) < ZigZag(d);
    delta = d;
    value = next;
  }
};

// Doubles that are decimals of up to six places (a power of 687.045 W, a ratio of 0.574399) are
// coded as the integer value x 10^scale, exactly when dividing back gives the very same bits.
constexpr double kPowersOf10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};
constexpr uint32_t kScaleBits = 3;
std::optional<int64_t> Scaled(double value, uint32_t scale) {
  const double scaled = value * kPowersOf10[scale];
  if (!(std::fabs(scaled) < 9007199254740992.0)) return std::nullopt;  // 2^53; NaN, inf
  const int64_t integer = std::llround(scaled);
  if (std::bit_cast<uint64_t>(static_cast<double>(integer) / kPowersOf10[scale]) !=
      std::bit_cast<uint64_t>(value)) {
    return std::nullopt;
  }
  return integer;
}

// What encoder and decoder both track within a block.
struct CodecState {
  uint64_t seq = 0, delta = 0;
  uint8_t meta = 0;
  uint64_t bits = 0;                     // the previous ok value (int64 or double bits, or index)
  uint32_t leading = 64, trailing = 64;  // the double's XOR window; 64: none yet
  IntPredictor integer;                  // int64 values, and decimal doubles' scaled values
  uint32_t scale = 0;                    // the decimal doubles' last scale
};

}  // namespace

struct HistoryStore::Block {
  uint64_t first_seq = 0, last_seq = 0;
  uint64_t first_ordinal = 0;  // of the series: counts every sample appended, never reused
  uint32_t count = 0;
  uint64_t bits = 0;
  std::vector<uint64_t> words;
  std::vector<std::string> strings;  // string fields: the block's own dictionary
};

struct HistoryStore::TickChunk {
  absl::Time times[kTickChunk];
};

struct HistoryStore::Series {
  std::deque<std::shared_ptr<const Block>> sealed;  // oldest first
  Block open;
  CodecState state;  // the open block's
  uint64_t appended = 0;
};

HistoryStore::HistoryStore(uint32_t gpu_count, std::vector<FieldType> types,
                           std::vector<absl::Duration> intervals, absl::Duration max_age)
    : types_(std::move(types)),
      max_age_(max_age),
      entities_(gpu_count),
      series_(gpu_count * types_.size()) {
  VIGIL_CHECK(intervals.size() == types_.size());
  for (size_t f = 0; f < types_.size(); ++f) {
    const size_t limit = static_cast<size_t>(max_age / intervals[f]) + 2;
    tick_limit_ = std::max(tick_limit_, limit);
    limits_.push_back(limit);
  }
}

HistoryStore::~HistoryStore() = default;
HistoryStore::HistoryStore(HistoryStore&&) noexcept = default;
HistoryStore& HistoryStore::operator=(HistoryStore&&) noexcept = default;
HistoryStore::Snapshot::Snapshot() = default;
HistoryStore::Snapshot::~Snapshot() = default;
HistoryStore::Snapshot::Snapshot(Snapshot&&) noexcept = default;
HistoryStore::Snapshot& HistoryStore::Snapshot::operator=(Snapshot&&) noexcept = default;

HistoryStore::Series& HistoryStore::series(uint32_t gpu, size_t field_index) {
  return series_[gpu * types_.size() + field_index];
}
const HistoryStore::Series& HistoryStore::series(uint32_t gpu, size_t field_index) const {
  return series_[gpu * types_.size() + field_index];
}

uint32_t HistoryStore::AddEntity() {
  series_.resize(series_.size() + types_.size());
  return entities_++;
}

void HistoryStore::ClearEntity(uint32_t entity) {
  VIGIL_CHECK(entity < entity_count());
  for (size_t f = 0; f < types_.size(); ++f) series(entity, f) = Series{};
}

void HistoryStore::BeginTick(uint64_t seq, absl::Time time) {
  if (tick_count_ == 0) {
    tick_chunks_.clear();
    chunks_first_seq_ = first_tick_seq_ = seq;
  } else {
    VIGIL_CHECK(seq == next_seq());
  }
  const uint64_t position = seq - chunks_first_seq_;
  if (position / kTickChunk >= tick_chunks_.size()) {
    tick_chunks_.push_back(std::make_shared<TickChunk>());
  }
  // Past every index a Snapshot may read: only ticks before next_seq() are ever served.
  tick_chunks_[position / kTickChunk]->times[position % kTickChunk] = time;
  ++tick_count_;
}

absl::Time HistoryStore::TickTime(uint64_t seq) const {
  const uint64_t position = seq - chunks_first_seq_;
  return tick_chunks_[position / kTickChunk]->times[position % kTickChunk];
}

void HistoryStore::Append(uint32_t gpu, size_t field_index, const FieldValue& value) {
  VIGIL_CHECK(tick_count_ > 0);
  const uint64_t seq = next_seq() - 1;
  Series& s = series(gpu, field_index);
  Block& block = s.open;
  CodecState& state = s.state;
  BitWriter out(&block.words, &block.bits);
  const uint8_t meta = MetaOf(value);
  if (block.count == 0) {
    block.first_seq = seq;
    block.first_ordinal = s.appended;
    state = CodecState{.seq = seq, .meta = meta};
    out.Put(meta, kMetaBits);
  } else {
    VIGIL_CHECK(seq > block.last_seq);
    const uint64_t delta = seq - state.seq;
    if (delta == state.delta && meta == state.meta) {
      out.Bit(false);
    } else {
      out.Bit(true);
      out.Bit(delta != state.delta);
      if (delta != state.delta) out.Varint(delta);
      out.Bit(meta != state.meta);
      if (meta != state.meta) out.Put(meta, kMetaBits);
    }
    state.seq = seq;
    state.delta = delta;
    state.meta = meta;
  }
  if (value.ok()) {
    switch (types_[field_index]) {
      case FieldType::kInt64: {
        const uint64_t bits = static_cast<uint64_t>(value.as_int());
        PutResidual(out, ZigZag(bits - state.integer.Predicted()));
        state.integer.Update(bits);
        state.bits = bits;
        break;
      }
      case FieldType::kDouble: {
        const uint64_t bits = std::bit_cast<uint64_t>(value.as_double());
        const uint64_t x = bits ^ state.bits;
        if (x == 0) {
          out.Bit(false);
          state.bits = bits;
          break;
        }
        out.Bit(true);
        // A decimal: at the last scale if it fits, else the smallest that does.
        std::optional<int64_t> scaled = Scaled(value.as_double(), state.scale);
        uint32_t scale = state.scale;
        for (uint32_t k = 0; !scaled && k < std::size(kPowersOf10); ++k) {
          if (k != state.scale && (scaled = Scaled(value.as_double(), k))) scale = k;
        }
        if (scaled) {
          out.Bit(false);
          out.Bit(scale != state.scale);
          if (scale != state.scale) out.Put(scale, kScaleBits);
          const uint64_t integer = static_cast<uint64_t>(*scaled);
          PutResidual(out, ZigZag(integer - state.integer.Predicted()));
          state.integer.Update(integer);
          state.scale = scale;
        } else {
          out.Bit(true);
          const uint32_t leading = static_cast<uint32_t>(std::countl_zero(x));
          const uint32_t trailing = static_cast<uint32_t>(std::countr_zero(x));
          if (state.leading < 64 && leading >= state.leading && trailing >= state.trailing) {
            out.Bit(false);  // inside the previous window
            out.Put(x >> state.trailing, 64 - state.leading - state.trailing);
          } else {
            out.Bit(true);
            const uint32_t length = 64 - leading - trailing;  // 1..64
            out.Put(leading, 6);
            out.Put(length - 1, 6);
            out.Put(x >> trailing, length);
            state.leading = leading;
            state.trailing = trailing;
          }
        }
        state.bits = bits;
        break;
      }
      case FieldType::kString: {
        const std::string& text = value.as_string();
        uint64_t index = 0;
        while (index < block.strings.size() && block.strings[index] != text) ++index;
        if (index == block.strings.size()) block.strings.push_back(text);
        if (block.count > 0 && index == state.bits) {
          out.Bit(false);
        } else {
          out.Bit(true);
          out.Put(index, kStringIndexBits);
        }
        state.bits = index;
        break;
      }
    }
  }
  block.last_seq = seq;
  ++block.count;
  ++s.appended;
  if (block.count == kBlockSamples) Seal(s);
}

void HistoryStore::Seal(Series& s) {
  auto sealed = std::make_shared<Block>(std::move(s.open));
  sealed->words.shrink_to_fit();
  sealed->strings.shrink_to_fit();
  s.sealed.push_back(std::move(sealed));
  s.open = Block{};
}

uint64_t HistoryStore::MinOrdinal(const Series& s, size_t field_index) const {
  return s.appended > limits_[field_index] ? s.appended - limits_[field_index] : 0;
}

void HistoryStore::Trim(absl::Time now) {
  const absl::Time cutoff = now - max_age_;
  while (tick_count_ > 0 && (TickTime(first_tick_seq_) < cutoff || tick_count_ > tick_limit_)) {
    ++first_tick_seq_;
    --tick_count_;
  }
  while (first_tick_seq_ - chunks_first_seq_ >= kTickChunk) {
    tick_chunks_.pop_front();
    chunks_first_seq_ += kTickChunk;
  }
  // A block goes when no sample of it can be served: all older than the retained ticks, or all
  // beyond the series' count bound.
  for (size_t i = 0; i < series_.size(); ++i) {
    Series& s = series_[i];
    const uint64_t min_ordinal = MinOrdinal(s, i % types_.size());
    auto gone = [&](const Block& block) {
      return block.last_seq < first_tick_seq_ || block.first_ordinal + block.count <= min_ordinal;
    };
    while (!s.sealed.empty() && gone(*s.sealed.front())) s.sealed.pop_front();
    if (s.sealed.empty() && s.open.count > 0 && gone(s.open)) s.open = Block{};
  }
}

uint64_t HistoryStore::FirstTickAt(absl::Time time, bool after) const {
  // Tick times only grow within the table (a clock step back shows up as equal or earlier
  // times, which binary search tolerates by returning some consistent split).
  uint64_t low = first_tick_seq_, high = next_seq();
  while (low < high) {
    const uint64_t mid = low + (high - low) / 2;
    const absl::Time at = TickTime(mid);
    if (after ? at <= time : at < time) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

HistoryStore::Snapshot HistoryStore::Read(uint32_t gpu, size_t field_index, absl::Time start,
                                          absl::Time end) const {
  Snapshot snapshot;
  snapshot.type_ = types_[field_index];
  if (tick_count_ == 0 || start > end) return snapshot;
  snapshot.seq_low_ = FirstTickAt(start, false);
  snapshot.seq_high_ = FirstTickAt(end, true);
  if (snapshot.seq_low_ >= snapshot.seq_high_) return snapshot;
  const Series& s = series(gpu, field_index);
  snapshot.min_ordinal_ = MinOrdinal(s, field_index);
  auto overlaps = [&](const Block& block) {
    return block.count > 0 && block.last_seq >= snapshot.seq_low_ &&
           block.first_seq < snapshot.seq_high_ &&
           block.first_ordinal + block.count > snapshot.min_ordinal_;
  };
  for (const std::shared_ptr<const Block>& block : s.sealed) {
    if (overlaps(*block)) snapshot.blocks_.push_back(block);
  }
  if (overlaps(s.open)) snapshot.blocks_.push_back(std::make_shared<const Block>(s.open));
  if (snapshot.blocks_.empty()) return snapshot;
  const uint64_t first_chunk = (snapshot.seq_low_ - chunks_first_seq_) / kTickChunk;
  const uint64_t last_chunk = (snapshot.seq_high_ - 1 - chunks_first_seq_) / kTickChunk;
  snapshot.ticks_first_seq_ = chunks_first_seq_ + first_chunk * kTickChunk;
  for (uint64_t c = first_chunk; c <= last_chunk; ++c) snapshot.ticks_.push_back(tick_chunks_[c]);
  return snapshot;
}

absl::Time HistoryStore::Snapshot::TimeOf(uint64_t seq) const {
  const uint64_t position = seq - ticks_first_seq_;
  return ticks_[position / kTickChunk]->times[position % kTickChunk];
}

template <typename Visit>
void HistoryStore::Snapshot::ForEach(Visit&& visit) const {
  for (const std::shared_ptr<const Block>& block : blocks_) {
    const bool whole = block->first_seq >= seq_low_ && block->last_seq < seq_high_ &&
                       block->first_ordinal >= min_ordinal_;
    BitReader in(block->words.data());
    CodecState state;
    FieldValue value;
    for (uint32_t i = 0; i < block->count; ++i) {
      if (i == 0) {
        state =
            CodecState{.seq = block->first_seq, .meta = static_cast<uint8_t>(in.Get(kMetaBits))};
      } else if (in.Bit()) {
        if (in.Bit()) state.delta = in.Varint();
        if (in.Bit()) state.meta = static_cast<uint8_t>(in.Get(kMetaBits));
        state.seq += state.delta;
      } else {
        state.seq += state.delta;
      }
      value.status = static_cast<ValueStatus>(state.meta & 15);
      value.injected = (state.meta & 16) != 0;
      if (value.status == ValueStatus::kOk) {
        switch (type_) {
          case FieldType::kInt64:
            state.bits = state.integer.Predicted() + UnZigZag(GetResidual(in));
            state.integer.Update(state.bits);
            break;
          case FieldType::kDouble:
            if (!in.Bit()) break;  // the same bits
            if (!in.Bit()) {       // a decimal
              if (in.Bit()) state.scale = static_cast<uint32_t>(in.Get(kScaleBits));
              const uint64_t integer = state.integer.Predicted() + UnZigZag(GetResidual(in));
              state.integer.Update(integer);
              state.bits = std::bit_cast<uint64_t>(
                  static_cast<double>(static_cast<int64_t>(integer)) / kPowersOf10[state.scale]);
            } else {
              if (in.Bit()) {
                state.leading = static_cast<uint32_t>(in.Get(6));
                const uint32_t length = static_cast<uint32_t>(in.Get(6)) + 1;
                state.trailing = 64 - state.leading - length;
                state.bits ^= in.Get(length) << state.trailing;
              } else {
                state.bits ^= in.Get(64 - state.leading - state.trailing) << state.trailing;
              }
            }
            break;
          case FieldType::kString:
            if (in.Bit()) state.bits = in.Get(kStringIndexBits);
            break;
        }
      }
      if (!whole) {
        if (state.seq >= seq_high_) return;  // seqs only grow: nothing further matches
        if (state.seq < seq_low_ || block->first_ordinal + i < min_ordinal_) continue;
      }
      if (value.status == ValueStatus::kOk) {
        switch (type_) {
          case FieldType::kInt64:
            value.value = static_cast<int64_t>(state.bits);
            break;
          case FieldType::kDouble:
            value.value = std::bit_cast<double>(state.bits);
            break;
          case FieldType::kString:
            value.value = block->strings[state.bits];
            break;
        }
      } else {
        value.value = int64_t{0};
      }
      if (!visit(state.seq, value)) return;
    }
  }
}

size_t HistoryStore::Snapshot::Count() const {
  size_t count = 0;
  for (const std::shared_ptr<const Block>& block : blocks_) {
    if (block->first_seq >= seq_low_ && block->last_seq < seq_high_ &&
        block->first_ordinal >= min_ordinal_) {
      count += block->count;
      continue;
    }
    // A block at an edge of the range: its samples' seqs say which match.
    Snapshot edge;
    edge.type_ = type_;
    edge.seq_low_ = seq_low_;
    edge.seq_high_ = seq_high_;
    edge.min_ordinal_ = min_ordinal_;
    edge.blocks_ = {block};
    edge.ForEach([&](uint64_t, const FieldValue&) {
      ++count;
      return true;
    });
  }
  return count;
}

void HistoryStore::Snapshot::Decode(size_t max_samples, std::vector<HistorySample>* out,
                                    bool* truncated) const {
  out->clear();
  const size_t count = Count();
  *truncated = count > max_samples;
  size_t skip = *truncated ? count - max_samples : 0;
  out->reserve(count - skip);
  ForEach([&](uint64_t seq, const FieldValue& value) {
    if (skip > 0) {
      --skip;
    } else {
      out->push_back({seq, TimeOf(seq), value});
    }
    return true;
  });
}

size_t HistoryStore::sample_count() const {
  size_t count = 0;
  if (tick_count_ == 0) return 0;
  for (uint32_t entity = 0; entity < entity_count(); ++entity) {
    for (size_t f = 0; f < types_.size(); ++f) {
      count += Read(entity, f, absl::InfinitePast(), absl::InfiniteFuture()).Count();
    }
  }
  return count;
}

size_t HistoryStore::encoded_bytes() const {
  size_t bytes = 0;
  for (const Series& s : series_) {
    for (const auto& block : s.sealed) bytes += block->words.size() * sizeof(uint64_t);
    bytes += s.open.words.size() * sizeof(uint64_t);
  }
  return bytes;
}

size_t HistoryStore::sealed_blocks() const {
  size_t blocks = 0;
  for (const Series& s : series_) blocks += s.sealed.size();
  return blocks;
}

size_t HistoryStore::memory_bytes() const {
  // A block made by make_shared: its control block (two counts, a vtable) and the Block itself.
  constexpr size_t kSharedBlockBytes = sizeof(Block) + 16;
  size_t bytes = series_.capacity() * sizeof(Series) +
                 tick_chunks_.size() * (sizeof(TickChunk) + 16 + sizeof(void*));
  auto block_bytes = [](const Block& block) {
    size_t total =
        block.words.capacity() * sizeof(uint64_t) + block.strings.capacity() * sizeof(std::string);
    for (const std::string& text : block.strings) total += text.capacity();
    return total;
  };
  for (const Series& s : series_) {
    bytes += s.sealed.size() * (sizeof(std::shared_ptr<const Block>) + kSharedBlockBytes);
    for (const auto& block : s.sealed) bytes += block_bytes(*block);
    bytes += block_bytes(s.open);
  }
  return bytes;
}

}  // namespace vigil
