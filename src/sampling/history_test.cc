// Tests for the history store: round trips, ranges, age and count bounds.
#include "sampling/history.h"

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

TEST(HistoryStoreTest, RebasesOffsetsOverLongRuns) {
  // 6-bit offsets: a series must rebase every ~60 ticks; values and seqs must survive it.
  HistoryStore store(1, {FieldType::kInt64}, {absl::Seconds(1)}, absl::Seconds(20), 6);
  for (uint64_t seq = 1; seq <= 1000; ++seq) {
    store.BeginTick(seq, kT0 + absl::Seconds(seq));
    store.Append(0, 0, FieldValue::Int(static_cast<int64_t>(seq)));
    store.Trim(kT0 + absl::Seconds(seq));
  }
  std::vector<HistorySample> out;
  bool truncated = false;
  store.Query(0, 0, absl::InfinitePast(), absl::InfiniteFuture(), 1000, &out, &truncated);
  ASSERT_EQ(out.size(), 21u);
  for (const HistorySample& sample : out) {
    EXPECT_EQ(sample.value, FieldValue::Int(static_cast<int64_t>(sample.seq)));
    EXPECT_EQ(sample.time, kT0 + absl::Seconds(static_cast<int64_t>(sample.seq)));
  }
  EXPECT_EQ(out.back().seq, 1000u);
}

TEST(HistoryStoreTest, StringsAreStoredOnceAndSurviveDictionaryCompaction) {
  HistoryStore store(1, {FieldType::kString}, {absl::Seconds(1)}, absl::Seconds(50));
  const absl::Time t0 = kT0;
  // Mostly one value (an identity field), then a value that changes every tick.
  for (uint64_t seq = 1; seq <= 300; ++seq) {
    store.BeginTick(seq, t0 + absl::Seconds(seq));
    store.Append(0, 0,
                 seq < 200 ? FieldValue::String("GPU-abc-constant-uuid-value")
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
  // The dictionary holds about what is live (51 strings), not all 102 strings ever seen.
  EXPECT_LE(store.strings_held(0, 0), 2u * 51 + 1);
  EXPECT_GE(store.strings_held(0, 0), 51u);
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
