// Benchmark of the kernel log parsers (`make bench`): records in /dev/kmsg's format, parsed as
// records and then as driver lines, as the engine's kernel-log reader does for every line the
// kernel logs. Two mixes: the driver's XID lines alone, and a kernel log where one line in 20 is
// the driver's. Reported as lines per second.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "kmsg/driver_line.h"
#include "kmsg/record.h"
#include "kmsg/sample_lines.h"

namespace vigil::kmsg {
namespace {

std::vector<std::string> Records(bool mostly_other) {
  std::vector<std::string> records;
  size_t xid = 0, other = 0;
  for (int i = 0; i < 2000; ++i) {
    const bool driver = !mostly_other || i % 20 == 0;
    const std::string message = driver ? kXidSamples[xid++ % std::size(kXidSamples)].line
                                       : kOtherLines[other++ % std::size(kOtherLines)];
    records.push_back("4," + std::to_string(1000 + i) + ",123456789,c;" + message);
  }
  return records;
}

void BM_KmsgParse(benchmark::State& state) {
  const std::vector<std::string> records = Records(state.range(0) == 1);
  size_t xids = 0;
  for (auto _ : state) {
    for (const std::string& text : records) {
      auto record = ParseRecord(text);
      if (!record.ok()) continue;
      const DriverLine line = ParseDriverLine(record->message);
      xids += std::holds_alternative<DriverXid>(line);
    }
  }
  benchmark::DoNotOptimize(xids);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * records.size()));
  state.SetLabel(state.range(0) == 1 ? "a kernel log, 1 line in 20 the driver's"
                                     : "XID lines only");
}
BENCHMARK(BM_KmsgParse)->Arg(0)->Arg(1);

}  // namespace
}  // namespace vigil::kmsg
