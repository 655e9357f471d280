// The compressed history store against the uncompressed one it replaced, on hours of the
// simulator's telemetry for every field at its default interval — a GPU lost and back, injected
// values, values past the count bound of a stopped clock — through the age trim: every query a
// client can make (whole range, windows inside blocks, truncation) answers the very same samples,
// bit for bit.
#include <bit>
#include <cmath>

#include "backend/sim_backend.h"
#include "fields/catalogue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reference/packed_history.h"
#include "sampling/history.h"

namespace vigil {
namespace {

// Same samples, values compared by their bits (NaN equals NaN, -0.0 differs from 0.0).
bool Same(const HistorySample& a, const HistorySample& b) {
  if (a.seq != b.seq || a.time != b.time || a.value.status != b.value.status ||
      a.value.injected != b.value.injected) {
    return false;
  }
  if (!a.value.ok()) return true;
  if (a.value.value.index() != b.value.value.index()) return false;
  if (std::holds_alternative<double>(a.value.value)) {
    return std::bit_cast<uint64_t>(a.value.as_double()) ==
           std::bit_cast<uint64_t>(b.value.as_double());
  }
  return a.value.value == b.value.value;
}

TEST(HistoryEquivalenceTest, HoursOfSimulatedTelemetryReadTheSameFromBothEncodings) {
  constexpr uint32_t kGpus = 3;
  auto sim = SimBackend::Create({.gpu_count = kGpus, .seed = 7});
  ASSERT_TRUE(sim.ok());
  std::vector<FieldId> ids;
  std::vector<FieldType> types;
  std::vector<absl::Duration> intervals;
  std::vector<int64_t> every;  // ticks between samples of field index i
  for (const FieldInfo& field : AllFields()) {
    ids.push_back(field.id);
    types.push_back(field.type);
    const absl::Duration interval = std::max(absl::Seconds(1), field.default_interval);
    intervals.push_back(interval);
    every.push_back(absl::ToInt64Seconds(interval));
  }
  const absl::Duration max_age = absl::Minutes(40);
  HistoryStore compressed(kGpus, types, intervals, max_age);
  PackedHistoryStore reference(kGpus, types, intervals, max_age);

  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  absl::Time now = t0;
  std::vector<FieldValue> values(ids.size());
  auto compare = [&](absl::Time start, absl::Time end, size_t max_samples) {
    for (uint32_t gpu = 0; gpu < kGpus; ++gpu) {
      for (size_t f = 0; f < ids.size(); ++f) {
        std::vector<HistorySample> got, want;
        bool got_truncated = false, want_truncated = false;
        compressed.Query(gpu, f, start, end, max_samples, &got, &got_truncated);
        reference.Query(gpu, f, start, end, max_samples, &want, &want_truncated);
        ASSERT_EQ(got.size(), want.size()) << "GPU " << gpu << " field " << ids[f];
        ASSERT_EQ(got_truncated, want_truncated) << "GPU " << gpu << " field " << ids[f];
        ASSERT_EQ(compressed.Count(gpu, f, start, end), reference.Count(gpu, f, start, end));
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(Same(got[i], want[i]))
              << "GPU " << gpu << " field " << ids[f] << " sample " << i << " seq " << want[i].seq;
        }
      }
    }
  };

  constexpr uint64_t kTicks = 3 * 3600;  // three hours at 1 s
  for (uint64_t seq = 1; seq <= kTicks; ++seq) {
    // A stopped clock for two minutes in the second hour: the count bound, not the age, trims.
    if (seq < 4000 || seq > 4120) now += absl::Seconds(1);
    if (seq == 2000) (*sim)->SetGpuLost(1, true);
    if (seq == 2300) (*sim)->SetGpuLost(1, false);
    compressed.BeginTick(seq, now);
    reference.BeginTick(seq, now);
    for (uint32_t gpu = 0; gpu < kGpus; ++gpu) {
      // A lost GPU's read fails: its samples say so, as the engine records them.
      if (!(*sim)->Read(gpu, ids, now, absl::MakeSpan(values)).ok()) {
        std::fill(values.begin(), values.end(), FieldValue::Error(ValueStatus::kGpuLost));
      }
      for (size_t f = 0; f < ids.size(); ++f) {
        if (static_cast<int64_t>(seq) % every[f] != 0) continue;
        FieldValue value = values[f];
        // A drill's injected values on GPU 2 for ten minutes of the first hour.
        if (gpu == 2 && seq >= 1200 && seq < 1800 && f % 3 == 0 && value.ok()) {
          value.injected = true;
          if (types[f] == FieldType::kDouble) value.value = value.as_double() * 4;
          if (types[f] == FieldType::kInt64) value.value = value.as_int() + 1000;
        }
        compressed.Append(gpu, f, value);
        reference.Append(gpu, f, value);
      }
    }
    compressed.Trim(now);
    reference.Trim(now);
    if (seq % 1800 == 0 || seq == 4100) {
      compare(absl::InfinitePast(), absl::InfiniteFuture(), 100000);
      compare(now - absl::Minutes(10), now, 100000);
      compare(now - absl::Minutes(31), now - absl::Minutes(13) - absl::Milliseconds(500), 100000);
      compare(absl::InfinitePast(), absl::InfiniteFuture(), 77);      // truncated to the newest
      compare(now + absl::Seconds(1), now + absl::Hours(1), 100000);  // nothing yet
    }
  }
  EXPECT_GT(compressed.sample_count(), 0u);
  EXPECT_EQ(compressed.sample_count(), reference.sample_count());
  // What it is for: the same samples in a fraction of the memory.
  EXPECT_LT(compressed.memory_bytes() * 3, reference.memory_bytes());
}

}  // namespace
}  // namespace vigil
