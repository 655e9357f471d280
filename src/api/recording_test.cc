// Tests of the flight recording's file format: a round trip of every kind of value (NaN, the
// infinities, -0.0, errors, injected), a header-only read, and every damage refused with its
// reason — cut short, a changed byte in the header or the body, another version, not a recording.
#include "api/recording.h"

#include <bit>
#include <cmath>

#include "common/crc32.h"
#include "common/gzip.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

Recording Example() {
  Recording r{.id = "20261201T213512Z-gpu2-s901",
              .node_name = "node-a",
              .engine_instance = "abc",
              .engine_version = "0.2.0",
              .backend = "sim",
              .gpu = 2,
              .uuid = "GPU-2",
              .gpu_name = "NVIDIA H100 80GB HBM3",
              .pci_bus_id = "00000000:3B:00.0",
              .serial = "1650000000002",
              .trigger_seq = 901,
              .trigger_time_us = 1'800'000'000'000'000,
              .trigger_summary = "driver FAIL: XID 79",
              .window_start_us = 1'799'999'100'000'000,
              .window_end_us = 1'800'000'120'000'000,
              .complete = true,
              .written_us = 1'800'000'121'000'000};
  r.incidents.push_back({.system = "driver",
                         .status = "FAIL",
                         .code = "DCGM_FR_FALLEN_OFF_BUS",
                         .message = "XID 79",
                         .action = "reboot",
                         .count = 1});
  RecordingSeries power{
      .field = 155, .name = "DCGM_FI_DEV_POWER_USAGE", .type = FieldType::kDouble};
  const double values[] = {687.045, std::nan(""), HUGE_VAL, -HUGE_VAL, -0.0, 0.1 + 0.2};
  for (size_t i = 0; i < std::size(values); ++i) {
    power.samples.push_back({.seq = 900 + i,
                             .time_us = 1'800'000'000'000'000 + int64_t(i),
                             .value = FieldValue::Double(values[i])});
  }
  power.samples.push_back(
      {.seq = 910, .time_us = 5, .value = FieldValue::Error(ValueStatus::kGpuLost)});
  FieldValue injected = FieldValue::Double(1e308);
  injected.injected = true;
  power.samples.push_back({.seq = 911, .time_us = 6, .value = injected});
  RecordingSeries xid{.field = 230, .name = "DCGM_FI_DEV_XID_ERRORS", .type = FieldType::kInt64};
  xid.samples.push_back({.seq = 901, .time_us = 7, .value = FieldValue::Int(INT64_MIN)});
  RecordingSeries serial{.field = 47, .name = "DCGM_FI_DEV_SERIAL", .type = FieldType::kString};
  serial.samples.push_back({.seq = 901, .time_us = 7, .value = FieldValue::String("a \"b\"\n")});
  r.series = {power, xid, serial};
  return r;
}

TEST(RecordingTest, RoundTripsEveryValueBitForBit) {
  const Recording r = Example();
  auto back = DecodeRecording(EncodeRecording(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, r.id);
  EXPECT_EQ(back->uuid, "GPU-2");
  EXPECT_EQ(back->trigger_summary, r.trigger_summary);
  EXPECT_TRUE(back->complete);
  ASSERT_EQ(back->incidents.size(), 1u);
  EXPECT_EQ(back->incidents[0].code, "DCGM_FR_FALLEN_OFF_BUS");
  ASSERT_EQ(back->series.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    ASSERT_EQ(back->series[s].samples.size(), r.series[s].samples.size());
    for (size_t i = 0; i < r.series[s].samples.size(); ++i) {
      const FieldValue& want = r.series[s].samples[i].value;
      const FieldValue& got = back->series[s].samples[i].value;
      EXPECT_EQ(back->series[s].samples[i].seq, r.series[s].samples[i].seq);
      EXPECT_EQ(back->series[s].samples[i].time_us, r.series[s].samples[i].time_us);
      EXPECT_EQ(got.status, want.status);
      EXPECT_EQ(got.injected, want.injected);
      if (want.ok() && r.series[s].type == FieldType::kDouble) {
        if (std::isnan(want.as_double())) {
          EXPECT_TRUE(std::isnan(got.as_double()));
        } else {
          EXPECT_EQ(std::bit_cast<uint64_t>(got.as_double()),
                    std::bit_cast<uint64_t>(want.as_double()))
              << i;
        }
      } else {
        EXPECT_EQ(got, want);
      }
    }
  }
  auto header = DecodeRecording(EncodeRecording(r), /*header_only=*/true);
  ASSERT_TRUE(header.ok());
  EXPECT_TRUE(header->series.empty());
  EXPECT_EQ(header->gpu, 2u);
}

TEST(RecordingTest, DamageIsRefusedWithItsReason) {
  const std::string bytes = EncodeRecording(Example());
  auto refused = [](std::string_view damaged) {
    auto decoded = DecodeRecording(damaged);
    EXPECT_FALSE(decoded.ok());
    return std::string(decoded.status().message());
  };
  EXPECT_THAT(refused(bytes.substr(0, bytes.size() - 10)), HasSubstr("announced"));
  std::string header_changed = bytes;
  header_changed[bytes.find("node-a")] = 'N';
  EXPECT_THAT(refused(header_changed), HasSubstr("checksum"));
  std::string body_changed = bytes;
  body_changed[bytes.size() - 20] ^= 0x5a;
  EXPECT_THAT(refused(body_changed), HasSubstr("its body"));
  std::string version = bytes;
  version[9] = '7';
  EXPECT_THAT(refused(version), HasSubstr("format version 7"));
  EXPECT_THAT(refused("hello\n"), HasSubstr("not a flight recording"));
  EXPECT_THAT(refused(""), HasSubstr("not a flight recording"));
  // Every cut of the file is refused, never misread or crashed on.
  for (size_t cut = 0; cut < bytes.size(); cut += 97)
    EXPECT_FALSE(DecodeRecording(bytes.substr(0, cut)).ok());
}

// Found by reading what the fuzz target (fuzz_test.cc) exercises: a hand-made file whose JSON
// has a number where a string belongs made the decoder throw (nlohmann's value()); now refused.
TEST(RecordingTest, AHandMadeFileWithTheWrongJsonTypesIsRefusedNotThrown) {
  const std::string file = EncodeRecording(Example());
  const size_t newline = file.find('\n');
  const size_t header_size = std::stoul(file.substr(0, newline).substr(11));
  std::string header = file.substr(newline + 1, header_size);
  const std::string body =
      *Gunzip(std::string_view(file).substr(newline + 1 + header_size), 1 << 20);
  const auto frame = [](const std::string& header, const std::string& body) {
    const std::string gzipped = Gzip(body, 1);
    return fmt::format("VIGILREC 1 {} {} {}\n", header.size(), Crc32(header), gzipped.size()) +
           header + gzipped;
  };
  std::string numeric_format = header;
  numeric_format.replace(numeric_format.find("\"vigil-flight-recording\""),
                         std::string("\"vigil-flight-recording\"").size(), "5");
  auto decoded = DecodeRecording(frame(numeric_format, body));
  EXPECT_FALSE(decoded.ok());
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("not a recording's"));
  for (const std::string key : {"\"name\":", "\"type\":"}) {
    std::string numeric = body;
    const size_t at = numeric.find(key) + key.size();
    numeric.replace(at, numeric.find('"', at + 1) - at + 1, "5");
    decoded = DecodeRecording(frame(header, numeric));
    EXPECT_FALSE(decoded.ok()) << key;
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("name or type is not a string"))
        << numeric.substr(0, 200);
  }
}

}  // namespace
}  // namespace vigil
