// Implements the process collector over /proc's text files (proc(5)).
#include "procmetrics/process_metrics.h"

#include <unistd.h>

#include <filesystem>
#include <limits>

#include "common/files.h"
#include "common/prometheus_text.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil::procmetrics {
namespace {

absl::Status Malformed(const std::string& path, std::string_view what) {
  return absl::DataLossError(fmt::format("{}: {}", path, what));
}

// The text of `path`; nullopt, with the reason noted in `stats`, when it cannot be read.
std::optional<std::string> ReadOrNote(const std::string& path, ProcessStats* stats) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    stats->errors.push_back(text.status());
    return std::nullopt;
  }
  return *std::move(text);
}

// stat: the fields after the command name, which is in parentheses and may hold anything.
void ReadStat(const std::string& proc_root, int64_t ticks, int64_t page_size, ProcessStats* stats) {
  const std::string path = proc_root + "/self/stat";
  const std::optional<std::string> text = ReadOrNote(path, stats);
  if (!text) return;
  const size_t close = text->rfind(')');
  if (close == std::string::npos) {
    stats->errors.push_back(Malformed(path, "no ')' after the command name"));
    return;
  }
  std::vector<std::string_view> fields;
  for (std::string_view field : Split(Trim(std::string_view(*text).substr(close + 1)), ' ')) {
    if (!field.empty()) fields.push_back(field);
  }
  // fields[0] is the state (field 3 of proc(5)): field N is fields[N - 3].
  const auto field = [&](int n) -> std::optional<uint64_t> {
    if (static_cast<size_t>(n - 3) >= fields.size()) return std::nullopt;
    return ParseUint64(fields[n - 3]);
  };
  const auto utime = field(14), stime = field(15), starttime = field(22), vsize = field(23),
             rss = field(24);
  if (!utime || !stime || !starttime || !vsize || !rss || ticks <= 0) {
    stats->errors.push_back(Malformed(path, "fields 14, 15, 22, 23 and 24 are not numbers"));
    return;
  }
  stats->cpu_seconds = static_cast<double>(*utime + *stime) / static_cast<double>(ticks);
  stats->virtual_memory_bytes = *vsize;
  stats->resident_memory_bytes = *rss * static_cast<uint64_t>(page_size);
  // The start time is in ticks since boot: the epoch's needs the boot time (/proc/stat btime).
  const std::string boot_path = proc_root + "/stat";
  const std::optional<std::string> boot = ReadOrNote(boot_path, stats);
  if (!boot) return;
  for (std::string_view line : Split(*boot, '\n')) {
    if (!line.starts_with("btime ")) continue;
    if (auto btime = ParseUint64(Trim(line.substr(6)))) {
      stats->start_time_seconds = static_cast<double>(*btime) +
                                  static_cast<double>(*starttime) / static_cast<double>(ticks);
      return;
    }
  }
  stats->errors.push_back(Malformed(boot_path, "no btime line"));
}

// limits: "Max open files  1048576  1048576  files" (the soft limit first; "unlimited").
void ReadLimits(const std::string& proc_root, ProcessStats* stats) {
  const std::string path = proc_root + "/self/limits";
  const std::optional<std::string> text = ReadOrNote(path, stats);
  if (!text) return;
  const auto soft = [](std::string_view rest) -> std::optional<uint64_t> {
    rest = Trim(rest);
    const std::string_view value = rest.substr(0, rest.find(' '));
    if (value == "unlimited") return std::numeric_limits<uint64_t>::max();
    return ParseUint64(value);
  };
  for (std::string_view line : Split(*text, '\n')) {
    if (line.starts_with("Max open files")) {
      stats->max_fds = soft(line.substr(std::string_view("Max open files").size()));
    } else if (line.starts_with("Max address space")) {
      stats->virtual_memory_max_bytes =
          soft(line.substr(std::string_view("Max address space").size()));
    }
  }
  if (!stats->max_fds || !stats->virtual_memory_max_bytes) {
    stats->errors.push_back(Malformed(path, "no soft limit of open files or address space"));
  }
}

void CountFds(const std::string& proc_root, ProcessStats* stats) {
  const std::string path = proc_root + "/self/fd";
  std::error_code error;
  uint64_t count = 0;
  for (std::filesystem::directory_iterator it(path, error), end; !error && it != end;
       it.increment(error)) {
    ++count;
  }
  if (error) {
    stats->errors.push_back(
        absl::UnavailableError(fmt::format("cannot list {}: {}", path, error.message())));
    return;
  }
  stats->open_fds = count;
}

// net/netstat: a header line and a value line per group; IpExt's InOctets and OutOctets.
void ReadNetstat(const std::string& proc_root, ProcessStats* stats) {
  const std::string path = proc_root + "/self/net/netstat";
  const std::optional<std::string> text = ReadOrNote(path, stats);
  if (!text) return;
  std::vector<std::string_view> names;
  for (std::string_view line : Split(*text, '\n')) {
    if (!line.starts_with("IpExt:")) continue;
    std::vector<std::string_view> words;
    for (std::string_view word : Split(Trim(line.substr(6)), ' ')) {
      if (!word.empty()) words.push_back(word);
    }
    if (names.empty()) {
      names = words;
      continue;
    }
    for (size_t i = 0; i < names.size() && i < words.size(); ++i) {
      if (names[i] == "InOctets") stats->network_receive_bytes = ParseUint64(words[i]);
      if (names[i] == "OutOctets") stats->network_transmit_bytes = ParseUint64(words[i]);
    }
    break;
  }
  if (!stats->network_receive_bytes || !stats->network_transmit_bytes) {
    stats->errors.push_back(Malformed(path, "no IpExt InOctets and OutOctets"));
  }
}

}  // namespace

ProcessStats ReadProcessStats(const std::string& proc_root, int64_t clock_ticks_per_second,
                              int64_t page_size) {
  ProcessStats stats;
  ReadStat(proc_root, clock_ticks_per_second, page_size, &stats);
  ReadLimits(proc_root, &stats);
  CountFds(proc_root, &stats);
  ReadNetstat(proc_root, &stats);
  return stats;
}

void ProcessCollector::Append(std::string* out) {
  const ProcessStats stats = ReadOwnProcessStats();
  if (!stats.errors.empty() && !logged_.exchange(true)) {
    std::string why;
    for (const absl::Status& error : stats.errors) {
      why += (why.empty() ? "" : "; ") + std::string(error.message());
    }
    spdlog::warn("process metrics left out (said once): {}", why);
  }
  AppendProcessMetrics(stats, out);
}

ProcessStats ReadOwnProcessStats() {
  ProcessStats stats = ReadProcessStats("/proc", sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
  // Listing fd/ opened a descriptor of its own, which the process does not otherwise hold.
  if (stats.open_fds && *stats.open_fds > 0) --*stats.open_fds;
  return stats;
}

void AppendProcessMetrics(const ProcessStats& stats, std::string* out) {
  PrometheusText text(out);
  // One family of one sample, in the same argument order for seconds and whole numbers.
  const auto seconds = [&](std::string_view name, MetricType type, std::string_view help,
                           const std::optional<double>& value) {
    if (!value) return;
    text.Family(name, type, help);
    text.Sample(name, {}, *value, 2);
  };
  const auto whole = [&](std::string_view name, MetricType type, std::string_view help,
                         const std::optional<uint64_t>& value) {
    if (!value) return;
    text.Family(name, type, help);
    text.Sample(name, {}, *value);
  };
  seconds("process_cpu_seconds_total", MetricType::kCounter,
          "Total user and system CPU time spent in seconds.", stats.cpu_seconds);
  whole("process_max_fds", MetricType::kGauge, "Maximum number of open file descriptors.",
        stats.max_fds);
  whole("process_network_receive_bytes_total", MetricType::kCounter,
        "Number of bytes received by the process over the network.", stats.network_receive_bytes);
  whole("process_network_transmit_bytes_total", MetricType::kCounter,
        "Number of bytes sent by the process over the network.", stats.network_transmit_bytes);
  whole("process_open_fds", MetricType::kGauge, "Number of open file descriptors.", stats.open_fds);
  whole("process_resident_memory_bytes", MetricType::kGauge, "Resident memory size in bytes.",
        stats.resident_memory_bytes);
  seconds("process_start_time_seconds", MetricType::kGauge,
          "Start time of the process since unix epoch in seconds.", stats.start_time_seconds);
  whole("process_virtual_memory_bytes", MetricType::kGauge, "Virtual memory size in bytes.",
        stats.virtual_memory_bytes);
  whole("process_virtual_memory_max_bytes", MetricType::kGauge,
        "Maximum amount of virtual memory available in bytes.", stats.virtual_memory_max_bytes);
}

}  // namespace vigil::procmetrics
