// Parses counters files. The default list and its help texts are dcgm-exporter's (4.x), so that
// dashboards and alert rules built on it see the same series and HELP lines.
#include "exporter/counters.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil {
namespace {

constexpr std::string_view kDefaultCsv = R"(# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message

# Clocks
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).

# Temperature
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).

# Power
DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).

# PCIE
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.

# Utilization (the sample period varies depending on the product)
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_ENC_UTIL,      gauge, Encoder utilization (in %).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).

# Errors and violations
DCGM_FI_DEV_XID_ERRORS,            gauge,   Value of the last XID error encountered.

# Memory usage
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).

# NVLink
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,            counter, Total number of NVLink bandwidth counters for all lanes.

# VGPU License status
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status

# Remapped rows
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,   counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE,           gauge,   Whether remapping of rows has failed

# Static configuration information. These appear as labels on the other metrics
DCGM_FI_DRIVER_VERSION,        label, Driver Version

# Datacenter Profiling (DCP) metrics
DCGM_FI_PROF_GR_ENGINE_ACTIVE,   gauge, Ratio of time the graphics engine is active.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.
DCGM_FI_PROF_DRAM_ACTIVE,        gauge, Ratio of cycles the device memory interface is active sending or receiving data.
DCGM_FI_PROF_PCIE_TX_BYTES,      gauge, The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
DCGM_FI_PROF_PCIE_RX_BYTES,      gauge, The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
)";

std::optional<ExporterMetric> ExporterMetricNamed(std::string_view name) {
  if (name == "DCGM_EXP_XID_ERRORS_COUNT") return ExporterMetric::kXidErrorsCount;
  if (name == "DCGM_EXP_CLOCK_EVENTS_COUNT") return ExporterMetric::kClockEventsCount;
  if (name == "DCGM_EXP_GPU_HEALTH_STATUS") return ExporterMetric::kGpuHealthStatus;
  return std::nullopt;
}

std::string_view Unquote(std::string_view text) {
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
    return text.substr(1, text.size() - 2);
  }
  return text;
}

}  // namespace

std::string_view DefaultCountersCsv() { return kDefaultCsv; }

std::vector<FieldId> Counters::FieldIds() const {
  std::vector<FieldId> ids;
  for (const Counter& counter : counters) {
    if (counter.field != nullptr &&
        std::find(ids.begin(), ids.end(), counter.field->id) == ids.end()) {
      ids.push_back(counter.field->id);
    }
  }
  return ids;
}

bool Counters::Has(ExporterMetric metric) const {
  return std::any_of(counters.begin(), counters.end(),
                     [&](const Counter& c) { return c.exporter == metric; });
}

absl::StatusOr<Counters> ParseCounters(std::string_view csv, std::string_view source) {
  Counters result;
  int number = 0;
  for (std::string_view line : Split(csv, '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Trim(line).empty() || Trim(line).front() == '#') continue;
    const auto error = [&](std::string_view message) {
      return absl::InvalidArgumentError(fmt::format("{}:{}: {}", source, number, message));
    };
    // field, type, help — the help may itself contain commas.
    const size_t first = line.find(',');
    const size_t second = first == std::string_view::npos ? first : line.find(',', first + 1);
    if (second == std::string_view::npos) {
      return error(fmt::format(
          "'{}' is not `field name, prometheus type, help message` (3 comma-separated fields)",
          Trim(line)));
    }
    Counter counter;
    counter.line = number;
    counter.name = std::string(Trim(line.substr(0, first)));
    counter.type = std::string(Trim(line.substr(first + 1, second - first - 1)));
    counter.help = std::string(Unquote(Trim(line.substr(second + 1))));
    if (counter.name == "DCGM_EXP_P2P_STATUS") {
      result.warnings.push_back(fmt::format(
          "{}:{}: DCGM_EXP_P2P_STATUS is not provided by Vigil; line skipped", source, number));
      continue;
    }
    counter.exporter = ExporterMetricNamed(counter.name);
    if (!counter.exporter) {
      auto field = ResolveField(counter.name);
      if (!field.ok() || std::isdigit(static_cast<unsigned char>(counter.name.front()))) {
        return error(fmt::format(
            "unknown field '{}': use a DCGM field name that `vigil info --fields` lists, or "
            "DCGM_EXP_XID_ERRORS_COUNT, DCGM_EXP_CLOCK_EVENTS_COUNT, DCGM_EXP_GPU_HEALTH_STATUS",
            counter.name));
      }
      counter.field = *field;
    }
    static constexpr std::string_view kTypes[] = {"gauge", "counter", "histogram", "summary",
                                                  "label"};
    if (std::find(std::begin(kTypes), std::end(kTypes), counter.type) == std::end(kTypes)) {
      return error(fmt::format(
          "unknown Prometheus type '{}' for {}: use gauge, counter, histogram, summary or label",
          counter.type, counter.name));
    }
    if (counter.field != nullptr && counter.field->type == FieldType::kString &&
        !counter.is_label()) {
      return error(fmt::format("{} is a string field: its type must be label", counter.name));
    }
    if (counter.exporter && counter.is_label()) {
      return error(fmt::format("{} is a metric, not a label", counter.name));
    }
    // A name listed twice is one metric: two HELP/TYPE blocks of one name would make Prometheus
    // refuse the scrape (dcgm-exporter's own 1.x-compatibility-metrics.csv lists two twice).
    if (auto first = std::find_if(result.counters.begin(), result.counters.end(),
                                  [&](const Counter& c) { return c.name == counter.name; });
        first != result.counters.end()) {
      result.warnings.push_back(fmt::format("{}:{}: {} is already listed on line {}; line skipped",
                                            source, number, counter.name, first->line));
      continue;
    }
    result.counters.push_back(std::move(counter));
  }
  // dcgm-exporter's order: DCGM fields by ID, then its own metrics (IDs 9001..).
  std::stable_sort(
      result.counters.begin(), result.counters.end(), [](const Counter& a, const Counter& b) {
        const auto key = [](const Counter& c) {
          return c.field != nullptr ? c.field->id : 9001 + static_cast<uint32_t>(*c.exporter);
        };
        return key(a) < key(b);
      });
  return result;
}

}  // namespace vigil
