// A fuzz test of the kernel log parsers: real driver lines (sample_lines.h) mutated — bytes
// flipped, replaced, inserted and deleted, lines cut and spliced — and random bytes, each parsed
// as a record and as a driver line. It checks what must hold for any input: nothing crashes or
// reads out of bounds (ASan in `make asan`), a parsed XID or SXid names a bus id in DCGM's form
// that the input itself spells (never another GPU's), and its code is in range. The saved-log
// splitter gets the same inputs in random pieces. VIGIL_FUZZ_ITERATIONS sets the number of inputs
// (1,000,000 in `make test`, more in `make fuzz`); the seed is fixed, so a failure repeats.
#include "testing/fuzz.h"

#include <cctype>

#include "gtest/gtest.h"
#include "kmsg/driver_line.h"
#include "kmsg/record.h"
#include "kmsg/sample_lines.h"

namespace vigil::kmsg {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The input must spell the bus id that was parsed: its bus and device ("3b:00"), whatever the
// case, and a domain that pads to the parsed one.
bool SpelledIn(const std::string& bus_id, std::string_view input) {
  if (bus_id.size() != 16 || bus_id[8] != ':' || bus_id[11] != ':' || bus_id[14] != '.') {
    return false;
  }
  for (size_t i : {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 13}) {
    if (!std::isxdigit(static_cast<unsigned char>(bus_id[i])) ||
        std::islower(static_cast<unsigned char>(bus_id[i]))) {
      return false;
    }
  }
  return Lower(input).find(Lower(bus_id.substr(9, 5))) != std::string::npos;
}

TEST(KmsgFuzzTest, MutatedAndRandomLinesNeverCrashOrMisattribute) {
  std::vector<std::string> seeds;
  for (const XidSample& sample : kXidSamples) seeds.emplace_back(sample.line);
  for (const char* line : kSxidLines) seeds.emplace_back(line);
  for (const char* line : kOtherLines) seeds.emplace_back(line);
  // Mostly the characters the format is made of, so mutations reach deep into the parser.
  testing::Mutator mutator(20261201, "0123456789abcdefABCDEF:.,;() =-'<>\\x\n PCI");
  const uint64_t iterations = testing::FuzzIterations(1'000'000);
  uint64_t xids = 0, sxids = 0, records = 0, splitter_bytes = 0;
  std::string log;
  for (uint64_t i = 0; i < iterations; ++i) {
    const std::string input =
        i % 8 == 7 ? mutator.Random() : mutator.Mutate(seeds[mutator.Below(seeds.size())], seeds);
    const DriverLine line = ParseDriverLine(input);
    if (const auto* xid = std::get_if<DriverXid>(&line)) {
      ++xids;
      ASSERT_TRUE(SpelledIn(xid->bus_id, input)) << xid->bus_id << " from " << input;
      ASSERT_GE(xid->code, 1u) << input;
      ASSERT_LE(xid->code, 65535u) << input;
    } else if (const auto* sxid = std::get_if<DriverSxid>(&line)) {
      ++sxids;
      ASSERT_TRUE(SpelledIn(sxid->bus_id, input)) << sxid->bus_id << " from " << input;
    }
    // As a whole record, header and all (mutated too, now and then).
    std::string record = "4," + std::to_string(i) + ",1000,c;" + input;
    if (i % 16 == 0) record = mutator.Mutate(record, seeds);
    if (auto parsed = ParseRecord(record); parsed.ok()) {
      ++records;
      ParseDriverLine(parsed->message);
    }
    log += record + "\n";
    if (log.size() > 64 * 1024) {
      // The splitter, in random pieces: it hands on no more than it was given, in records that
      // are each at most its limit.
      size_t handed = 0;
      Splitter splitter(
          [&](std::string_view piece) {
            handed += piece.size();
            EXPECT_LE(piece.size(), 4096u);
          },
          4096);
      for (size_t at = 0; at < log.size();) {
        const size_t size = 1 + mutator.Below(300);
        splitter.Feed(std::string_view(log).substr(at, size));
        at += size;
      }
      splitter.Finish();
      ASSERT_LE(handed, log.size());
      splitter_bytes += log.size();
      log.clear();
    }
  }
  // The mutations reach the parser's insides: a good share still parses.
  EXPECT_GT(xids, iterations / 100);
  EXPECT_GT(sxids, iterations / 1000);
  EXPECT_GT(records, iterations / 2);
  std::printf(
      "fuzz: %llu inputs, %llu parsed as XIDs, %llu as SXids, %llu records; %llu bytes "
      "through the splitter\n",
      static_cast<unsigned long long>(iterations), static_cast<unsigned long long>(xids),
      static_cast<unsigned long long>(sxids), static_cast<unsigned long long>(records),
      static_cast<unsigned long long>(splitter_bytes));
}

}  // namespace
}  // namespace vigil::kmsg
