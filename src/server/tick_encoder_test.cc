// Tests for the shared subscription encoding: the framed bytes parse to the right TickUpdate,
// and one encoding serves every subscriber with the same filter and tick.
#include "server/tick_encoder.h"

#include "grpcpp/impl/codegen/proto_utils.h"
#include "gtest/gtest.h"
#include "server/convert.h"
#include "vigil/v1/engine.pb.h"

namespace vigil {
namespace {

std::shared_ptr<Snapshot> MakeSnapshot(uint64_t seq) {
  std::vector<const FieldInfo*> fields = {FindField(150), FindField(155), FindField(54)};
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->seq = seq;
  snapshot->time = absl::FromUnixSeconds(1'800'000'000) + absl::Seconds(seq);
  snapshot->gpu_count = 2;
  snapshot->counters = {.ticks = seq, .gpu_read_failures = 3, .gpu_read_timeouts = 1};
  snapshot->layout = std::make_shared<const FieldLayout>(fields);
  for (uint32_t gpu = 0; gpu < 2; ++gpu) {
    snapshot->values.push_back({FieldValue::Int(40 + gpu), seq, snapshot->time});
    snapshot->values.push_back({FieldValue::Double(300.5), seq, snapshot->time});
    snapshot->values.push_back({FieldValue::String("GPU-" + std::to_string(gpu)), 1,
                                absl::FromUnixSeconds(1'800'000'001)});
  }
  return snapshot;
}

v1::TickUpdate Parse(grpc::ByteBuffer buffer) {
  v1::TickUpdate update;
  EXPECT_TRUE(grpc::SerializationTraits<v1::TickUpdate>::Deserialize(&buffer, &update).ok());
  return update;
}

TEST(TickEncoderTest, FramedBytesAreTheUpdateWithThisSubscribersDrops) {
  TickEncoder encoder("abc");
  const auto snapshot = MakeSnapshot(7);
  const TickFilter filter{{1}, {0, 2}};
  const auto body = encoder.Encode(*snapshot, filter, filter.Key());

  v1::TickUpdate expected;
  expected.set_instance_id("abc");
  expected.set_seq(7);
  expected.set_timestamp_us(absl::ToUnixMicros(snapshot->time));
  AppendValues(*snapshot, filter.gpus, filter.fields, false, expected.mutable_values());
  ToProto(snapshot->counters, expected.mutable_counters());

  EXPECT_EQ(Parse(TickEncoder::Frame(body, 0)).SerializeAsString(), expected.SerializeAsString());
  expected.set_dropped_ticks(300);  // a multi-byte varint
  EXPECT_EQ(Parse(TickEncoder::Frame(body, 300)).SerializeAsString(), expected.SerializeAsString());
  const v1::TickUpdate parsed = Parse(TickEncoder::Frame(body, 300));
  ASSERT_EQ(parsed.values_size(), 2);
  EXPECT_EQ(parsed.values(0).gpu(), 1u);
  EXPECT_EQ(parsed.values(0).int_value(), 41);
  EXPECT_EQ(parsed.values(1).string_value(), "GPU-1");
  EXPECT_EQ(parsed.values(1).sample_seq(), 1u);
  EXPECT_EQ(parsed.counters().ticks(), 7u);
  EXPECT_EQ(parsed.counters().gpu_read_timeouts(), 1u);
}

TEST(TickEncoderTest, OneEncodingPerTickAndFilter) {
  TickEncoder encoder("abc");
  const auto tick7 = MakeSnapshot(7);
  const TickFilter all{{0, 1}, {0, 1, 2}};
  const TickFilter some{{0}, {1}};
  const auto first = encoder.Encode(*tick7, all, all.Key());
  EXPECT_EQ(encoder.Encode(*tick7, all, all.Key()), first);  // the same bytes, shared
  EXPECT_NE(encoder.Encode(*tick7, some, some.Key()), first);
  const auto tick8 = MakeSnapshot(8);
  const auto next = encoder.Encode(*tick8, all, all.Key());
  EXPECT_NE(next, first);
  EXPECT_EQ(Parse(TickEncoder::Frame(next, 0)).seq(), 8u);
  EXPECT_NE(TickFilter({{0}, {1}}).Key(), TickFilter({{1}, {0}}).Key());
}

}  // namespace
}  // namespace vigil
