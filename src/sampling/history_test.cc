// Tests for the history store: round trips, ranges, age and count bounds.
#include "sampling/history.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class HistoryTest : public ::testing::Test {
 protected:
  // Two GPUs; fields: int (1 s), double (1 s), string (1 s), int every 10 s.
  HistoryStore store_{
      2,
      {FieldType::kInt64, FieldType::kDouble, FieldType::kString, FieldType::kInt64},
      {absl::Seconds(1), absl::Seconds(1), absl::Seconds(1), absl::Seconds(10)},
      absl::Minutes(1)};

  void Tick(uint64_t seq) {
    const absl::Time now = kT0 + absl::Seconds(seq);
    store_.BeginTick(seq, now);
    store_.Append(0, 0, FieldValue::Int(static_cast<int64_t>(seq) * 10));
    store_.Append(1, 1, FieldValue::Double(seq + 0.5));
    store_.Append(0, 2, FieldValue::String("s" + std::to_string(seq)));
    if (seq % 10 == 0) store_.Append(0, 3, FieldValue::Error(ValueStatus::kNotSupported));
    store_.Trim(now);
  }

  std::vector<HistorySample> Query(uint32_t gpu, size_t field, absl::Time start, absl::Time end,
                                   size_t max = 100000, bool* truncated = nullptr) {
    std::vector<HistorySample> out;
    bool t = false;
    store_.Query(gpu, field, start, end, max, &out, truncated ? truncated : &t);
    return out;
  }
};

TEST_F(HistoryTest, RoundTripsEveryTypeAndStatus) {
  for (uint64_t seq = 1; seq <= 20; ++seq) Tick(seq);
  FieldValue injected = FieldValue::Int(900);
  injected.injected = true;
  store_.BeginTick(21, kT0 + absl::Seconds(21));
  store_.Append(0, 0, injected);

  auto ints = Query(0, 0, kT0, kT0 + absl::Seconds(100));
  ASSERT_EQ(ints.size(), 21u);
  EXPECT_EQ(ints[0].seq, 1u);
  EXPECT_EQ(ints[0].time, kT0 + absl::Seconds(1));
  EXPECT_EQ(ints[0].value, FieldValue::Int(10));
  EXPECT_EQ(ints[20].value, injected);

  auto doubles = Query(1, 1, kT0, kT0 + absl::Seconds(100));
  ASSERT_EQ(doubles.size(), 20u);
  EXPECT_EQ(doubles[4].value, FieldValue::Double(5.5));

  auto strings = Query(0, 2, kT0 + absl::Seconds(3), kT0 + absl::Seconds(4));
  ASSERT_EQ(strings.size(), 2u);
  EXPECT_EQ(strings[1].value, FieldValue::String("s4"));

  auto errors = Query(0, 3, kT0, kT0 + absl::Seconds(100));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].value.status, ValueStatus::kNotSupported);
  EXPECT_TRUE(Query(1, 0, kT0, kT0 + absl::Seconds(100)).empty());
}

TEST_F(HistoryTest, RangesAreInclusiveAndTruncationKeepsNewest) {
  for (uint64_t seq = 1; seq <= 30; ++seq) Tick(seq);
  auto range = Query(0, 0, kT0 + absl::Seconds(5), kT0 + absl::Seconds(9));
  ASSERT_EQ(range.size(), 5u);
  EXPECT_EQ(range.front().seq, 5u);
  EXPECT_EQ(range.back().seq, 9u);
  EXPECT_EQ(store_.Count(0, 0, kT0 + absl::Seconds(5), kT0 + absl::Seconds(9)), 5u);
  bool truncated = false;
  auto newest = Query(0, 0, kT0, kT0 + absl::Seconds(30), 3, &truncated);
  EXPECT_TRUE(truncated);
  ASSERT_EQ(newest.size(), 3u);
  EXPECT_EQ(newest.front().seq, 28u);
  EXPECT_TRUE(Query(0, 0, kT0 + absl::Seconds(9), kT0 + absl::Seconds(5)).empty());
  EXPECT_TRUE(Query(0, 0, kT0 + absl::Seconds(100), kT0 + absl::Seconds(200)).empty());
}

TEST_F(HistoryTest, DropsSamplesOlderThanMaxAge) {
  for (uint64_t seq = 1; seq <= 600; ++seq) Tick(seq);
  auto all = Query(0, 0, absl::InfinitePast(), absl::InfiniteFuture());
  ASSERT_FALSE(all.empty());
  EXPECT_GE(all.front().time, kT0 + absl::Seconds(600) - absl::Minutes(1));
  EXPECT_EQ(all.size(), 61u);
  EXPECT_EQ(Query(0, 3, absl::InfinitePast(), absl::InfiniteFuture()).size(), 7u);
  EXPECT_EQ(Query(0, 2, absl::InfinitePast(), absl::InfiniteFuture()).back().value,
            FieldValue::String("s600"));
}

TEST_F(HistoryTest, CountBoundHoldsEvenWithoutTrimming) {
  // A clock that stands still never ages samples out; the count bound still caps each series.
  for (uint64_t seq = 1; seq <= 1000; ++seq) {
    store_.BeginTick(seq, kT0);
    store_.Append(0, 0, FieldValue::Int(static_cast<int64_t>(seq)));
    store_.Append(0, 2, FieldValue::String(std::to_string(seq)));
    store_.Trim(kT0);
  }
  auto all = Query(0, 0, absl::InfinitePast(), absl::InfiniteFuture());
  EXPECT_EQ(all.size(), 62u);  // 60 s / 1 s + 2
  EXPECT_EQ(all.back().value, FieldValue::Int(1000));
  auto strings = Query(0, 2, absl::InfinitePast(), absl::InfiniteFuture());
  ASSERT_EQ(strings.size(), 62u);
  EXPECT_EQ(strings.back().value, FieldValue::String("1000"));
  EXPECT_EQ(strings.front().value, FieldValue::String("939"));
}

// Across many blocks: every kind of value and status survives, exactly — the widest int64 deltas,
// NaN, infinities and -0.0, an injected flag that comes and goes, a seq step that changes — and a
// range that starts and ends inside blocks matches exactly what was appended.
TEST(HistoryStoreTest, BlocksRoundTripEveryValueExactly) {
  HistoryStore store(1, {FieldType::kInt64, FieldType::kDouble, FieldType::kString},
                     {absl::Seconds(1), absl::Seconds(1), absl::Seconds(1)}, absl::Hours(2));
  const int64_t ints[] = {0, 1, -1, INT64_MAX, INT64_MIN, 42, 1 << 20, -(1 << 20), 7};
  const double doubles[] = {0.0,
                            -0.0,
                            1.5,
                            std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(),
                            -1e308,
                            5e-324,
                            300.125};
  std::vector<std::array<FieldValue, 3>> expected;
  uint64_t seq = 0;
  for (int i = 0; i < 5000; ++i) {
    if (i % 1000 == 999) {
      // Two ticks without these series (a slower cadence for a while): the seq step changes.
      for (int skipped = 0; skipped < 2; ++skipped) {
        ++seq;
        store.BeginTick(seq, kT0 + absl::Seconds(static_cast<int64_t>(seq)));
      }
    }
    ++seq;
    store.BeginTick(seq, kT0 + absl::Seconds(static_cast<int64_t>(seq)));
    std::array<FieldValue, 3> values = {
        // Wrapping on purpose: INT64_MAX + 3 is INT64_MIN + 2, the widest residuals.
        FieldValue::Int(static_cast<int64_t>(static_cast<uint64_t>(ints[i % std::size(ints)]) +
                                             static_cast<uint64_t>(i % 7))),
        FieldValue::Double(doubles[i % std::size(doubles)]),
        FieldValue::String(i % 300 < 150 ? "GPU-constant" : "value-" + std::to_string(i / 10))};
    if (i % 97 == 0) values[0] = FieldValue::Error(ValueStatus::kGpuLost);
    if (i % 13 == 0) values[1].injected = true;
    if (i % 501 == 0) values[2] = FieldValue::Error(ValueStatus::kNotSupported);
    for (size_t f = 0; f < 3; ++f) store.Append(0, f, values[f]);
    expected.push_back(values);
    store.Trim(kT0 + absl::Seconds(static_cast<int64_t>(seq)));
  }
  EXPECT_GE(store.sealed_blocks(), 3u * 4);
  for (size_t f = 0; f < 3; ++f) {
    std::vector<HistorySample> out;
    bool truncated = false;
    store.Query(0, f, absl::InfinitePast(), absl::InfiniteFuture(), 100000, &out, &truncated);
    ASSERT_EQ(out.size(), expected.size()) << f;
    for (size_t i = 0; i < out.size(); ++i) {
      const FieldValue& want = expected[i][f];
      if (want.ok() && f == 1 && std::isnan(want.as_double())) {
        ASSERT_TRUE(out[i].value.ok() && std::isnan(out[i].value.as_double())) << i;
        EXPECT_EQ(out[i].value.injected, want.injected);
      } else if (want.ok() && f == 1) {
        ASSERT_EQ(std::bit_cast<uint64_t>(out[i].value.as_double()),
                  std::bit_cast<uint64_t>(want.as_double()))
            << i;  // -0.0 stays -0.0
      } else {
        ASSERT_EQ(out[i].value, want) << "field " << f << " sample " << i;
      }
    }
  }
  // A range inside blocks: [seq 1500, seq 2600].
  std::vector<HistorySample> middle;
  bool truncated = false;
  store.Query(0, 0, kT0 + absl::Seconds(1500), kT0 + absl::Seconds(2600), 100000, &middle,
              &truncated);
  ASSERT_FALSE(middle.empty());
  EXPECT_EQ(middle.front().seq, 1500u);
  EXPECT_EQ(middle.back().seq, 2600u);
  EXPECT_EQ(store.Count(0, 0, kT0 + absl::Seconds(1500), kT0 + absl::Seconds(2600)), middle.size());
  for (const HistorySample& sample : middle) {
    EXPECT_EQ(sample.time, kT0 + absl::Seconds(static_cast<int64_t>(sample.seq)));
  }
}

TEST(HistoryStoreTest, StringsAreStoredOncePerBlockAndGoWithIt) {
  HistoryStore store(1, {FieldType::kString}, {absl::Seconds(1)}, absl::Seconds(50));
  const absl::Time t0 = kT0;
  // Mostly one value (an identity field), then a value that changes every tick.
  for (uint64_t seq = 1; seq <= 3000; ++seq) {
    store.BeginTick(seq, t0 + absl::Seconds(seq));
    store.Append(0, 0,
                 seq < 2000 ? FieldValue::String("GPU-abc-constant-uuid-value")
                            : FieldValue::String("changing-" + std::to_string(seq)));
    store.Trim(t0 + absl::Seconds(seq));
  }
  std::vector<HistorySample> out;
  bool truncated = false;
  store.Query(0, 0, absl::InfinitePast(), absl::InfiniteFuture(), 1000, &out, &truncated);
  ASSERT_EQ(out.size(), 51u);
  for (const HistorySample& sample : out) {
    EXPECT_EQ(sample.value, FieldValue::String("changing-" + std::to_string(sample.seq)));
  }
  // What is held is about the live blocks' strings (at most two blocks of them), not all 1,001
  // strings ever seen.
  EXPECT_LE(store.memory_bytes(), 2 * HistoryStore::kBlockSamples * 80 + 100'000);
}

// Entities added later share the tick table and are bounded like the first; a cleared one is
// empty for its next user.
TEST(HistoryStoreTest, EntitiesComeAndGoSharingOneTickTable) {
  HistoryStore store(0, {FieldType::kInt64}, {absl::Seconds(1)}, absl::Seconds(10));
  EXPECT_EQ(store.entity_count(), 0u);
  const uint32_t a = store.AddEntity(), b = store.AddEntity();
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 1u);
  for (uint64_t seq = 1; seq <= 30; ++seq) {
    const absl::Time now = kT0 + absl::Seconds(seq);
    store.BeginTick(seq, now);
    store.Append(a, 0, FieldValue::Int(static_cast<int64_t>(seq)));
    if (seq > 25) store.Append(b, 0, FieldValue::Int(-static_cast<int64_t>(seq)));
    store.Trim(now);
  }
  EXPECT_LE(store.Count(a, 0, absl::InfinitePast(), absl::InfiniteFuture()), 12u);
  EXPECT_EQ(store.Count(b, 0, absl::InfinitePast(), absl::InfiniteFuture()), 5u);
  store.ClearEntity(b);
  EXPECT_EQ(store.Count(b, 0, absl::InfinitePast(), absl::InfiniteFuture()), 0u);
  store.BeginTick(31, kT0 + absl::Seconds(31));
  store.Append(b, 0, FieldValue::Int(7));  // its next user starts afresh
  std::vector<HistorySample> samples;
  bool truncated = false;
  store.Query(b, 0, absl::InfinitePast(), absl::InfiniteFuture(), 10, &samples, &truncated);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].seq, 31u);
  EXPECT_EQ(samples[0].value.as_int(), 7);
}

}  // namespace
}  // namespace vigil
