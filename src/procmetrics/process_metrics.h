// The process_* series that Prometheus' client libraries write about the process itself
// (client_golang's process collector; dcgm-exporter 4.8.4's --enable-exporter-metrics), read from
// /proc: CPU seconds, resident and virtual memory, open and maximum file descriptors, start time,
// and the network namespace's bytes in and out. `proc_root` is "/proc" outside tests. A file that
// cannot be read leaves its series out (and says why), never a made-up value.
// Functions over files, and a collector with an atomic flag: thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vigil::procmetrics {

struct ProcessStats {
  std::optional<double> cpu_seconds;                 // utime + stime
  std::optional<double> start_time_seconds;          // since the epoch: btime + starttime
  std::optional<uint64_t> virtual_memory_bytes;      // vsize
  std::optional<uint64_t> resident_memory_bytes;     // rss pages x page size
  std::optional<uint64_t> open_fds;                  // entries of fd/
  std::optional<uint64_t> max_fds;                   // the soft "Max open files" limit
  std::optional<uint64_t> virtual_memory_max_bytes;  // the soft "Max address space" limit
  std::optional<uint64_t> network_receive_bytes;     // net/netstat IpExt InOctets
  std::optional<uint64_t> network_transmit_bytes;    // ... OutOctets
  // Why a series is missing, one line per file that could not be read or parsed.
  std::vector<absl::Status> errors;
};

// What the files of PROC_ROOT/self (stat, limits, fd/, net/netstat) and PROC_ROOT/stat (btime)
// say. `clock_ticks_per_second` and `page_size` are the system's (sysconf) outside tests.
ProcessStats ReadProcessStats(const std::string& proc_root, int64_t clock_ticks_per_second,
                              int64_t page_size);
// The same for this process on this system.
ProcessStats ReadOwnProcessStats();

// Appends the process_* families in client_golang's order (by name), with its HELP and types.
void AppendProcessMetrics(const ProcessStats& stats, std::string* out);

// --enable-exporter-metrics of an endpoint: this process's series, read at each scrape; the
// first time a file cannot be read is logged, once. Thread-safe.
class ProcessCollector {
 public:
  void Append(std::string* out);

 private:
  std::atomic<bool> logged_{false};
};

}  // namespace vigil::procmetrics
