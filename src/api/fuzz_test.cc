// Fuzz targets of what api/ reads from outside the process (testing/fuzz.h): flight recordings
// (files anyone with the state dir can hand to `vigil recordings` and `vigil history
// --recording`) and the remediation annotations (JSON on Node objects, read from the API server).
// For any input: a Status, never an exception or a crash; what decodes encodes back to what
// decodes the same (a fixed point), so nothing read is half-understood.
#include "testing/fuzz.h"

#include <cmath>

#include "api/recording.h"
#include "api/remediation.h"
#include "common/crc32.h"
#include "common/gzip.h"
#include "fmt/format.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

constexpr std::string_view kJsonAlphabet = "{}[]\":,0123456789.-eE truefalsnl\\u";

Recording Example() {
  Recording r{.id = "20261201T213512Z-gpu2-s901",
              .node_name = "node-a",
              .engine_instance = "abc",
              .engine_version = "0.2.0",
              .backend = "sim",
              .gpu = 2,
              .uuid = "GPU-2",
              .trigger_seq = 901,
              .trigger_time_us = 1'800'000'000'000'000,
              .trigger_summary = "driver FAIL: XID 79",
              .window_start_us = 1'799'999'100'000'000,
              .window_end_us = 1'800'000'120'000'000,
              .complete = true};
  r.incidents.push_back({.system = "driver", .status = "FAIL", .code = "DCGM_FR_FALLEN_OFF_BUS"});
  RecordingSeries power{
      .field = 155, .name = "DCGM_FI_DEV_POWER_USAGE", .type = FieldType::kDouble};
  power.samples.push_back({.seq = 900, .time_us = 1, .value = FieldValue::Double(687.045)});
  power.samples.push_back({.seq = 901, .time_us = 2, .value = FieldValue::Double(std::nan(""))});
  power.samples.push_back(
      {.seq = 902, .time_us = 3, .value = FieldValue::Error(ValueStatus::kGpuLost)});
  RecordingSeries xid{.field = 230, .name = "DCGM_FI_DEV_XID_ERRORS", .type = FieldType::kInt64};
  xid.samples.push_back({.seq = 901, .time_us = 7, .value = FieldValue::Int(79)});
  RecordingSeries serial{.field = 47, .name = "DCGM_FI_DEV_SERIAL", .type = FieldType::kString};
  serial.samples.push_back({.seq = 901, .time_us = 7, .value = FieldValue::String("a \"b\"")});
  r.series = {power, xid, serial};
  return r;
}

// A recording file around a (mutated) header and body: framed as the engine frames them (the
// right sizes, checksum and gzip), so that mutations reach the JSON inside, not only the frame.
std::string Framed(std::string_view header, std::string_view body) {
  const std::string gzipped = Gzip(body, 1);
  return fmt::format("VIGILREC 1 {} {} {}\n", header.size(), Crc32(header), gzipped.size()) +
         std::string(header) + gzipped;
}

TEST(ApiFuzzTest, RecordingsDecodeToAFixedPointOrAreRefused) {
  const std::string file = EncodeRecording(Example());
  // The seeds: the file itself, and its header and body (JSON) as "HEADER\x01BODY", which the
  // target frames.
  const size_t newline = file.find('\n');
  const size_t header_size = std::stoul(file.substr(0, newline).substr(11));
  const std::string header = file.substr(newline + 1, header_size);
  auto body = Gunzip(std::string_view(file).substr(newline + 1 + header_size), 1 << 20);
  ASSERT_TRUE(body.ok());
  const std::vector<std::string> seeds = {file, header + '\x01' + *body};
  const testing::FuzzRun run = testing::Fuzz(
      "flight recording", seeds, std::string(kJsonAlphabet) + "\x01", 20'000,
      [](const std::string& input) {
        std::string bytes = input;
        if (!input.starts_with("VIGILREC")) {
          const size_t split = input.find('\x01');
          if (split == std::string::npos) return false;
          bytes = Framed(std::string_view(input).substr(0, split),
                         std::string_view(input).substr(split + 1));
        }
        const absl::StatusOr<Recording> header_only = DecodeRecording(bytes, true);
        const absl::StatusOr<Recording> decoded = DecodeRecording(bytes);
        if (!decoded.ok()) {
          EXPECT_FALSE(decoded.status().message().empty());
          return false;
        }
        EXPECT_TRUE(header_only.ok()) << "the whole file decodes but its header does not";
        const std::string again = EncodeRecording(*decoded);
        const absl::StatusOr<Recording> twice = DecodeRecording(again);
        EXPECT_TRUE(twice.ok()) << twice.status();
        if (twice.ok()) {
          EXPECT_EQ(EncodeRecording(*twice), again) << bytes;
        }
        return true;
      });
  EXPECT_GT(run.accepted, run.inputs / 100) << "mutations still decode now and then";
}

// One annotation's parser and printer: what parses prints to what parses and prints the same.
template <typename T>
void FuzzAnnotation(std::string_view name, const std::vector<std::string>& seeds,
                    absl::StatusOr<T> (*parse)(std::string_view), std::string (*print)(const T&)) {
  testing::Fuzz(name, seeds, std::string(kJsonAlphabet), 50'000, [&](const std::string& input) {
    const absl::StatusOr<T> parsed = parse(input);
    if (!parsed.ok()) {
      EXPECT_FALSE(parsed.status().message().empty());
      return false;
    }
    const std::string printed = print(*parsed);
    const absl::StatusOr<T> again = parse(printed);
    EXPECT_TRUE(again.ok()) << input << " printed as " << printed;
    if (again.ok()) {
      EXPECT_EQ(print(*again), printed) << input;
    }
    return true;
  });
}

TEST(ApiFuzzTest, RemediationAnnotationsParseToAFixedPointOrAreRefused) {
  PublishedFaults faults{.engine = "e1", .seq = 7, .pods_known = true};
  faults.faults.push_back({.gpu = 3,
                           .uuid = "GPU-3",
                           .system = "driver",
                           .code = "DCGM_FR_FALLEN_OFF_BUS",
                           .message = "XID 79",
                           .action = v1::RECOMMENDED_ACTION_REBOOT,
                           .first_seen = absl::FromUnixSeconds(1'800'000'000)});
  faults.gpu_pods.push_back({.uuid = "GPU-3", .pods = {"ml/train-0"}});
  faults.devices.push_back({.uuid = "GPU-3",
                            .driver = "gpu.nvidia.com",
                            .pool = "n1",
                            .device = "gpu-3",
                            .rule = "vigil-n1-gpu-3"});
  FuzzAnnotation<PublishedFaults>("gpu-faults annotation", {FaultsToJson(faults)}, &ParseFaults,
                                  &FaultsToJson);
  const ActionRequest request{.id = "r1",
                              .gpus = {{.index = 3, .uuid = "GPU-3"}},
                              .reason = "XID 79",
                              .requested = absl::FromUnixSeconds(1'800'000'000)};
  FuzzAnnotation<ActionRequest>("action request annotation", {RequestToJson(request)},
                                &ParseRequest, &RequestToJson);
  const ActionResult result{.id = "r1",
                            .outcome = ActionOutcome::kRefused,
                            .message = "in use",
                            .finished = absl::FromUnixSeconds(1'800'000'001)};
  FuzzAnnotation<ActionResult>("action result annotation", {ResultToJson(result)}, &ParseResult,
                               &ResultToJson);
  NodeRemediation state{
      .step = RemediationStep::kDraining,
      .action = v1::RECOMMENDED_ACTION_RESET_GPU,
      .gpus = {{.index = 3, .uuid = "GPU-3"}},
      .incident = "XID 48",
      .episode_started = absl::FromUnixSeconds(1'800'000'000),
      .step_started = absl::FromUnixSeconds(1'800'000'010),
      .attempts = {absl::FromUnixSeconds(1'799'999'000)},
      .request_id = "r1",
      .cordoned = true,
      .scope = EpisodeScope::kGpu,
      .node_tainted = true,
      .drain = {{.id = "ml/train-0", .outcome = DrainPodOutcome::kBlocked, .attempts = 2}},
      .drain_rounds = 2,
      .message = "draining"};
  state.devices = faults.devices;
  FuzzAnnotation<NodeRemediation>("remediation annotation", {RemediationToJson(state)},
                                  &ParseRemediation, &RemediationToJson);
}

}  // namespace
}  // namespace vigil
