// Implements the nvml backend: discovery, the field-to-NVML mapping, error mapping, GPM and the
// XID event thread.
#include "backend/nvml_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "common/check.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "common/thread.h"
#include "fields/catalogue.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// Catalogue fields served by nvmlDeviceGetFieldValues, sorted by field; a field summing two
// NVML fields lists both.
struct BatchedSource {
  FieldId field;
  unsigned int nvml_fields[2];
  int count;
  unsigned int scope = 0;  // nvmlFieldValue_t.scopeId (kScopeAllLinks: every NVLink summed)
};
// Field 440 + link: the NVLink data counters of one link.
constexpr BatchedSource NvlinkLink(unsigned int link) {
  return {fid::kNvlinkBandwidthL0 + link,
          {nvml::kFiNvlinkThroughputDataTx, nvml::kFiNvlinkThroughputDataRx},
          2,
          link};
}
constexpr BatchedSource kBatched[] = {
    {fid::kMemoryTemp, {nvml::kFiMemoryTemp}, 1},
    {fid::kTotalEnergy, {nvml::kFiTotalEnergyConsumption}, 1},
    {fid::kPcieReplayCounter, {nvml::kFiPcieReplayCounter}, 1},
    {fid::kPowerViolation, {nvml::kFiPerfPolicyPower}, 1},
    {fid::kThermalViolation, {nvml::kFiPerfPolicyThermal}, 1},
    {fid::kSyncBoostViolation, {nvml::kFiPerfPolicySyncBoost}, 1},
    {fid::kBoardLimitViolation, {nvml::kFiPerfPolicyBoardLimit}, 1},
    {fid::kLowUtilViolation, {nvml::kFiPerfPolicyLowUtilization}, 1},
    {fid::kReliabilityViolation, {nvml::kFiPerfPolicyReliability}, 1},
    {fid::kEccSbeVolTotal, {nvml::kFiEccSbeVolTotal}, 1},
    {fid::kEccDbeVolTotal, {nvml::kFiEccDbeVolTotal}, 1},
    {fid::kEccSbeAggTotal, {nvml::kFiEccSbeAggTotal}, 1},
    {fid::kEccDbeAggTotal, {nvml::kFiEccDbeAggTotal}, 1},
    {fid::kRetiredSbe, {nvml::kFiRetiredSbe}, 1},
    {fid::kRetiredDbe, {nvml::kFiRetiredDbe}, 1},
    {fid::kRetiredPending, {nvml::kFiRetiredPending}, 1},
    {fid::kUncorrectableRemappedRows, {nvml::kFiRemappedUncorrectable}, 1},
    {fid::kCorrectableRemappedRows, {nvml::kFiRemappedCorrectable}, 1},
    {fid::kRowRemapFailure, {nvml::kFiRemappedFailure}, 1},
    {fid::kRowRemapPending, {nvml::kFiRemappedPending}, 1},
    {fid::kNvlinkCrcFlitErrors, {nvml::kFiNvlinkCrcFlitErrorTotal}, 1},
    {fid::kNvlinkCrcDataErrors, {nvml::kFiNvlinkCrcDataErrorTotal}, 1},
    {fid::kNvlinkReplayErrors, {nvml::kFiNvlinkReplayErrorTotal}, 1},
    {fid::kNvlinkRecoveryErrors, {nvml::kFiNvlinkRecoveryErrorTotal}, 1},
    // DCGM's definition: payload TX + RX over every link (NVML sums them for kScopeAllLinks),
    // published as the rate between two samples in KiB/s / 1000 (DcgmCacheManager.cpp,
    // ReadAndCacheNvLinkBandwidth).
    // Per link (440-445): the same counters with the link as the scope.
    NvlinkLink(0),
    NvlinkLink(1),
    NvlinkLink(2),
    NvlinkLink(3),
    NvlinkLink(4),
    NvlinkLink(5),
    {fid::kNvlinkBandwidthTotal,
     {nvml::kFiNvlinkThroughputDataTx, nvml::kFiNvlinkThroughputDataRx},
     2,
     nvml::kScopeAllLinks},
    {fid::kGpuRecoveryAction, {nvml::kFiGpuRecoveryAction}, 1},
};

// The entry of a table sorted by field for `field`, or null.
template <typename Source, size_t N>
const Source* FindSource(const Source (&table)[N], FieldId field) {
  const Source* it = std::lower_bound(std::begin(table), std::end(table), field,
                                      [](const Source& s, FieldId f) { return s.field < f; });
  return it != std::end(table) && it->field == field ? it : nullptr;
}

const BatchedSource* FindBatched(FieldId field) { return FindSource(kBatched, field); }

// Catalogue fields served by GPM, sorted by field, as percent (scale 0.01 → ratio) or MiB/s (→
// B/s).
struct GpmSource {
  FieldId field;
  unsigned int metric;
  double scale;
};
constexpr GpmSource kGpm[] = {
    {fid::kProfGrEngineActive, nvml::kGpmGraphicsUtil, 0.01},
    {fid::kProfSmActive, nvml::kGpmSmUtil, 0.01},
    {fid::kProfSmOccupancy, nvml::kGpmSmOccupancy, 0.01},
    {fid::kProfPipeTensorActive, nvml::kGpmAnyTensorUtil, 0.01},
    {fid::kProfDramActive, nvml::kGpmDramBwUtil, 0.01},
    {fid::kProfPipeFp64Active, nvml::kGpmFp64Util, 0.01},
    {fid::kProfPipeFp32Active, nvml::kGpmFp32Util, 0.01},
    {fid::kProfPipeFp16Active, nvml::kGpmFp16Util, 0.01},
    {fid::kProfPcieTxBytes, nvml::kGpmPcieTxPerSec, double{kMiB}},
    {fid::kProfPcieRxBytes, nvml::kGpmPcieRxPerSec, double{kMiB}},
    {fid::kProfNvlinkTxBytes, nvml::kGpmNvlinkTotalTxPerSec, double{kMiB}},
    {fid::kProfNvlinkRxBytes, nvml::kGpmNvlinkTotalRxPerSec, double{kMiB}},
};

const GpmSource* FindGpm(FieldId field) { return FindSource(kGpm, field); }
// The first entries of kGpm a MIG instance has (the activity ratios, fields 1001-1008).
constexpr size_t kGpmPerInstanceMetrics = 8;
static_assert(kGpm[kGpmPerInstanceMetrics - 1].field == fid::kProfPipeFp16Active);

// The status a failed NVML call gives its field. GPU_IS_LOST is handled by the caller (the whole
// GPU is lost, not one field).
ValueStatus StatusOf(nvml::Return code) {
  switch (code) {
    case nvml::kErrorNotSupported:
    case nvml::kErrorFunctionNotFound:
    case nvml::kErrorArgumentVersionMismatch:  // the driver does not know this struct version
      return ValueStatus::kNotSupported;
    case nvml::kErrorNoPermission:
      return ValueStatus::kNoPermission;
    case nvml::kErrorTimeout:
      return ValueStatus::kTimeout;
    case nvml::kErrorNoData:
      return ValueStatus::kNoData;
    default:
      return ValueStatus::kReadError;
  }
}

bool IsGpuGone(nvml::Return code) {
  return code == nvml::kErrorGpuIsLost || code == nvml::kErrorGpuNotFound;
}

// An error that stands for the whole GPU rather than one value: lost, or a GPU the driver will not
// serve until it is reset. NVML_ERROR_RESET_REQUIRED comes from any call on such a GPU (nvml.h);
// read as a per-field error it made every health system UNKNOWN, where gpud reports "GPU requires
// reset" (unhealthy, reset or reboot).
bool IsWholeGpuFailure(nvml::Return code) {
  return IsGpuGone(code) || code == nvml::kErrorResetRequired;
}

std::string BrandName(int brand) {
  static constexpr const char* kBrands[] = {"Unknown",
                                            "Quadro",
                                            "Tesla",
                                            "NVS",
                                            "GRID",
                                            "GeForce",
                                            "Titan",
                                            "NVIDIA Virtual Applications",
                                            "NVIDIA Virtual PC",
                                            "NVIDIA Virtual Compute Server",
                                            "NVIDIA RTX Virtual Workstation",
                                            "NVIDIA Cloud Gaming",
                                            "Quadro RTX",
                                            "NVIDIA RTX",
                                            "NVIDIA",
                                            "GeForce RTX",
                                            "Titan RTX"};
  if (brand < 0 || static_cast<size_t>(brand) >= std::size(kBrands)) {
    return fmt::format("brand {}", brand);
  }
  return kBrands[brand];
}

// An NVML field value as a catalogue value of `type`.
FieldValue FromNvmlValue(const nvml::FieldValue& value, FieldType type) {
  double as_double = 0;
  int64_t as_int = 0;
  switch (value.value_type) {
    case nvml::kValueTypeDouble:
      as_double = value.value.d_val;
      as_int = static_cast<int64_t>(std::llround(as_double));
      break;
    case nvml::kValueTypeUnsignedInt:
      as_int = value.value.ui_val;
      break;
    case nvml::kValueTypeUnsignedLong:
      as_int = static_cast<int64_t>(value.value.ul_val);
      break;
    case nvml::kValueTypeUnsignedLongLong:
      as_int = static_cast<int64_t>(value.value.ull_val);
      break;
    case nvml::kValueTypeSignedLongLong:
      as_int = value.value.sll_val;
      break;
    case nvml::kValueTypeSignedInt:
      as_int = value.value.si_val;
      break;
    case nvml::kValueTypeUnsignedShort:
      as_int = value.value.us_val;
      break;
    default:
      return FieldValue::Error(ValueStatus::kReadError);
  }
  if (value.value_type != nvml::kValueTypeDouble) as_double = static_cast<double>(as_int);
  return type == FieldType::kDouble ? FieldValue::Double(as_double) : FieldValue::Int(as_int);
}

// An answer of nvmlDeviceGetFieldValues with the value type some drivers mislabel set right, as
// DCGM sets it (DcgmCacheManager.cpp): the ECC counters are unsigned long long whatever the label
// ("WAR for NVML Bug 2032468": NVML leaves the type at 0, a double, and a volatile DBE count read
// as a double is a denormal that rounds to 0, a missed FAIL), and memory temperature is an
// unsigned int ("nvbugs/4300930 affecting r545": labelled a double; 0 °C where it is 48).
nvml::FieldValue WithDriverBugsWorkedAround(nvml::FieldValue answer) {
  if (answer.field_id >= nvml::kFiEccSbeVolTotal && answer.field_id <= nvml::kFiEccDbeAggTotal) {
    answer.value_type = nvml::kValueTypeUnsignedLongLong;
  } else if (answer.field_id == nvml::kFiMemoryTemp) {
    answer.value_type = nvml::kValueTypeUnsignedInt;
  }
  return answer;
}

FieldType TypeOf(FieldId field) {
  const FieldInfo* info = FindField(field);
  return info != nullptr ? info->type : FieldType::kInt64;
}

}  // namespace

// One Read of one GPU: issues the batched and GPM queries once, memoises NVML calls that serve
// several fields, and remembers whether the GPU turned out to be lost.
class NvmlBackend::Reader {
 public:
  // `state`: the GPU's, or one of its MIG GPU instances'.
  Reader(NvmlBackend* backend, uint32_t gpu, GpuState* state = nullptr)
      : backend_(*backend),
        api_(backend->api_),
        gpu_(gpu),
        state_(state != nullptr ? *state : *backend->gpu_state_[gpu]) {}

  // Issues nvmlDeviceGetFieldValues for every batched field in `fields`.
  void FetchBatched(absl::Span<const FieldId> fields) {
    state_.field_values.clear();
    next_answer_ = 0;
    for (FieldId field : fields) {
      if (const BatchedSource* source = FindBatched(field)) {
        for (int i = 0; i < source->count; ++i) {
          nvml::FieldValue request{};
          request.field_id = source->nvml_fields[i];
          request.scope_id = source->scope;
          state_.field_values.push_back(request);
        }
      }
    }
    if (state_.field_values.empty()) return;
    if (api_.DeviceGetFieldValues == nullptr) {
      batched_error_ = nvml::kErrorFunctionNotFound;
      return;
    }
    batched_error_ = api_.DeviceGetFieldValues(
        state_.device, static_cast<int>(state_.field_values.size()), state_.field_values.data());
    Check(batched_error_);
  }

  // Takes this read's GPM sample and, with the previous one, computes every GPM metric.
  void FetchGpm(absl::Span<const FieldId> fields) {
    bool wanted = false;
    for (FieldId field : fields) wanted |= FindGpm(field) != nullptr;
    if (!wanted || !state_.gpm_supported) return;
    nvml::GpmSample& current = state_.gpm_samples[state_.gpm_current];
    const nvml::Return sampled =
        state_.gpm_parent != nullptr
            ? api_.GpmMigSampleGet(state_.gpm_parent, state_.gpm_gpu_instance, current)
            : api_.GpmSampleGet(state_.device, current);
    if (Check(sampled) != nvml::kSuccess) {
      gpm_error_ = sampled;
      state_.gpm_have_previous = false;
      return;
    }
    const bool had_previous = state_.gpm_have_previous;
    const nvml::GpmSample previous = state_.gpm_samples[1 - state_.gpm_current];
    state_.gpm_current = 1 - state_.gpm_current;
    state_.gpm_have_previous = true;
    if (!had_previous) {
      gpm_error_ = nvml::kErrorNoData;  // a rate needs two samples: the next read has it
      return;
    }
    // A MIG instance has only the activity ratios (kGpm's first eight): its PCIe and NVLink
    // traffic is the GPU's. Asking it for those can make the driver reject the whole call.
    const size_t wanted_metrics =
        state_.gpm_parent != nullptr ? kGpmPerInstanceMetrics : std::size(kGpm);
    nvml::GpmMetricsGet& request = *state_.gpm_request;
    const auto ask = [&](size_t first, size_t count) {
      request.version = nvml::kGpmMetricsGetVersion;
      request.num_metrics = static_cast<unsigned int>(count);
      request.sample1 = previous;
      request.sample2 = current;
      for (size_t i = 0; i < count; ++i) {
        request.metrics[i] = {};
        request.metrics[i].metric_id = kGpm[first + i].metric;
      }
      return Check(api_.GpmMetricsGet(&request));
    };
    gpm_error_ = ask(0, wanted_metrics);
    if (gpm_error_ != nvml::kSuccess && !IsWholeGpuFailure(gpm_error_)) {
      // One metric the GPU or instance lacks can fail the whole request: ask one metric per call,
      // as DCGM does, so the others keep their values.
      std::vector<nvml::GpmMetric> one_by_one(wanted_metrics);
      for (size_t i = 0; i < wanted_metrics; ++i) {
        const nvml::Return code = ask(i, 1);
        one_by_one[i] = request.metrics[0];
        one_by_one[i].metric_id = kGpm[i].metric;
        if (code != nvml::kSuccess) one_by_one[i].nvml_return = code;
      }
      for (size_t i = 0; i < wanted_metrics; ++i) request.metrics[i] = one_by_one[i];
      request.num_metrics = static_cast<unsigned int>(wanted_metrics);
      gpm_error_ = nvml::kSuccess;
    }
    gpm_computed_ = gpm_error_ == nvml::kSuccess;
  }

  FieldValue Field(FieldId field) {
    if (const BatchedSource* source = FindBatched(field)) return Batched(field, *source);
    if (const GpmSource* source = FindGpm(field)) return Gpm(field, *source);
    return Direct(field);
  }

  // A string field's value, "" when it cannot be read (discovery's identity texts).
  std::string Text(FieldId field) {
    FieldValue value = Field(field);
    return value.ok() ? value.as_string() : std::string();
  }

  // Whether a call answered for the whole GPU (IsWholeGpuFailure), and the first such answer.
  bool gpu_failed() const { return gpu_failed_; }
  nvml::Return failure() const { return failure_; }

 private:
  // Notes a failure of the whole GPU; returns `code`.
  nvml::Return Check(nvml::Return code) {
    if (IsWholeGpuFailure(code) && !gpu_failed_) {
      gpu_failed_ = true;
      failure_ = code;
    }
    return code;
  }

  // A field's value from an NVML call's result, logging the first failure of each kind.
  FieldValue Result(FieldId field, nvml::Return code, FieldValue value) {
    if (code == nvml::kSuccess) return value;
    Check(code);
    const ValueStatus status = StatusOf(code);
    // Not supported is a fact, not a failure; no data is a rate's first sample.
    if (status != ValueStatus::kNotSupported && status != ValueStatus::kNoData &&
        state_.logged.insert((uint64_t{field} << 32) | static_cast<uint32_t>(code)).second) {
      const FieldInfo* info = FindField(field);
      spdlog::warn("GPU {}: reading {} failed: {}; it reads as {} until it succeeds", gpu_,
                   info != nullptr ? info->name : std::string_view("a field"),
                   backend_.library_->ErrorString(code), ValueStatusName(status));
    }
    return FieldValue::Error(status);
  }
  FieldValue Unsupported() { return FieldValue::Error(ValueStatus::kNotSupported); }

  // Precondition: called for the batched fields in the order FetchBatched() saw them, whose
  // answers are in that order.
  FieldValue Batched(FieldId field, const BatchedSource& source) {
    const size_t first = next_answer_;
    next_answer_ += source.count;
    if (batched_error_ != nvml::kSuccess) return Result(field, batched_error_, {});
    // With ECC off the driver answers the ECC counters with success and values it never set
    // (DCGM checks the mode first too): not supported, not garbage.
    if (IsEccCounter(field) && EccOff()) return Unsupported();
    int64_t sum_int = 0;
    double sum_double = 0;
    const FieldType type = TypeOf(field);
    for (int i = 0; i < source.count; ++i) {
      VIGIL_CHECK(first + i < state_.field_values.size());
      const nvml::FieldValue* answer = &state_.field_values[first + i];
      if (answer->field_id != source.nvml_fields[i]) {
        return FieldValue::Error(ValueStatus::kReadError);  // the library reordered them
      }
      if (answer->nvml_return == nvml::kErrorInvalidArgument) {
        // A driver that predates the field id answers that value alone with INVALID_ARGUMENT
        // (the GPU recovery action, 230, before R575): the field is not supported there, not a
        // failed read that would leave its health system UNKNOWN for good.
        return Unsupported();
      }
      if (answer->nvml_return != nvml::kSuccess) return Result(field, answer->nvml_return, {});
      const FieldValue converted = FromNvmlValue(WithDriverBugsWorkedAround(*answer), type);
      if (!converted.ok()) return converted;
      sum_int += type == FieldType::kDouble ? 0 : converted.as_int();
      sum_double += type == FieldType::kDouble ? converted.as_double() : 0;
    }
    if (field == fid::kNvlinkBandwidthTotal ||
        (field >= fid::kNvlinkBandwidthL0 && field <= fid::kNvlinkBandwidthL5)) {
      // The later of the TX and RX timestamps, as DCGM takes it; a driver that leaves them 0 gets
      // the time of the read (DCGM's ReadAndCacheNvLinkBandwidth substitutes the current time),
      // else the rate never moves off 0.
      int64_t timestamp_us = 0;
      for (int i = 0; i < source.count; ++i) {
        timestamp_us = std::max<int64_t>(timestamp_us, state_.field_values[first + i].timestamp);
      }
      if (timestamp_us <= 0) timestamp_us = absl::ToUnixMicros(backend_.clock_->Now());
      return NvlinkRate(field, sum_int, timestamp_us);
    }
    return Plausible(field, type == FieldType::kDouble ? FieldValue::Double(sum_double)
                                                       : FieldValue::Int(sum_int));
  }

  // Field 449 (or a link's, 440-445) from the NVLink data total (KiB) at NVML's timestamp (µs):
  // the rate since the previous sample in KiB/s / 1000, as DCGM publishes it; 0 for the first
  // sample, as DCGM.
  FieldValue NvlinkRate(FieldId field, int64_t total_kib, int64_t timestamp_us) {
    const auto known = state_.nvlink_previous.find(field);
    const std::optional<std::pair<int64_t, int64_t>> previous =
        known != state_.nvlink_previous.end() ? std::optional(known->second) : std::nullopt;
    state_.nvlink_previous[field] = std::make_pair(total_kib, timestamp_us);
    if (!previous.has_value() || timestamp_us <= previous->second || total_kib < previous->first) {
      return FieldValue::Int(0);  // the first sample, no time between, or the counters reset
    }
    const double seconds = static_cast<double>(timestamp_us - previous->second) / 1e6;
    return FieldValue::Int(static_cast<int64_t>(
        std::llround(static_cast<double>(total_kib - previous->first) / seconds / 1000.0)));
  }

  static bool IsEccCounter(FieldId field) {
    return field == fid::kEccSbeVolTotal || field == fid::kEccDbeVolTotal ||
           field == fid::kEccSbeAggTotal || field == fid::kEccDbeAggTotal;
  }

  // Whether ECC is known to be off on this GPU (asked once per read).
  bool EccOff() {
    const auto& [code, enabled] = EccMode();
    return code == nvml::kSuccess && !enabled;
  }

  // The ECC mode, asked once per read (field 84 and the ECC counters' check share it).
  const std::pair<nvml::Return, bool>& EccMode() {
    if (!ecc_mode_.has_value()) {
      int current = 0, pending = 0;
      const nvml::Return code = api_.DeviceGetEccMode == nullptr
                                    ? nvml::kErrorFunctionNotFound
                                    : api_.DeviceGetEccMode(state_.device, &current, &pending);
      ecc_mode_ = std::make_pair(code, current == nvml::kFeatureEnabled);
    }
    return *ecc_mode_;
  }

  // A temperature no GPU or HBM stack reaches (some drivers answer memory temperature with an
  // unset double or a wrapped unsigned) is a read error, logged once, not a reading that would
  // trip the thermal rules.
  FieldValue Plausible(FieldId field, FieldValue value) {
    if ((field != fid::kGpuTemp && field != fid::kMemoryTemp) || !value.ok()) return value;
    const int64_t celsius = value.as_int();
    if (celsius >= -40 && celsius <= 200) return value;
    if (state_.logged.insert((uint64_t{field} << 32) | 0xffffffffu).second) {
      spdlog::warn(
          "GPU {}: the driver reports a temperature of {} °C for field {}; ignored as "
          "implausible",
          gpu_, celsius, field);
    }
    return FieldValue::Error(ValueStatus::kReadError);
  }

  FieldValue Gpm(FieldId field, const GpmSource& source) {
    if (!state_.gpm_supported) return Unsupported();
    if (!gpm_computed_) return Result(field, gpm_error_, {});
    for (size_t i = 0; i < std::size(kGpm); ++i) {
      const nvml::GpmMetric& metric = state_.gpm_request->metrics[i];
      if (metric.metric_id != source.metric || i >= state_.gpm_request->num_metrics) continue;
      if (metric.nvml_return != nvml::kSuccess) return Result(field, metric.nvml_return, {});
      // GPM can answer success with NaN (DCGM checks for it too): no value this tick, rather
      // than llround(NaN) turning a byte rate into -9223372036854775808.
      if (!std::isfinite(metric.value)) return FieldValue::Error(ValueStatus::kNoData);
      const double value = metric.value * source.scale;
      return TypeOf(field) == FieldType::kDouble
                 ? FieldValue::Double(value)
                 : FieldValue::Int(static_cast<int64_t>(std::llround(value)));
    }
    return FieldValue::Error(ValueStatus::kReadError);
  }

  // Calls fn(args..., &out) when the entry point exists; the value via make(out).
  template <typename Out, typename Fn, typename Make, typename... Args>
  FieldValue Call(FieldId field, Fn fn, Make make, Args... args) {
    if (fn == nullptr) return Unsupported();
    Out out{};
    const nvml::Return code = fn(state_.device, args..., &out);
    return Result(field, code, code == nvml::kSuccess ? make(out) : FieldValue{});
  }
  FieldValue UintCall(FieldId field, nvml::Return (*fn)(nvml::Device, unsigned int*)) {
    return Call<unsigned int>(field, fn, [](unsigned int v) { return FieldValue::Int(v); });
  }
  FieldValue StringCall(FieldId field, nvml::Return (*fn)(nvml::Device, char*, unsigned int),
                        unsigned int size) {
    if (fn == nullptr) return Unsupported();
    std::string buffer(size, '\0');
    const nvml::Return code = fn(state_.device, buffer.data(), size);
    buffer.resize(strnlen(buffer.data(), size));
    return Result(field, code, FieldValue::String(std::move(buffer)));
  }
  FieldValue Milliwatts(FieldId field, nvml::Return (*fn)(nvml::Device, unsigned int*)) {
    return Call<unsigned int>(field, fn,
                              [](unsigned int mw) { return FieldValue::Double(mw / 1000.0); });
  }

  FieldValue Utilization(FieldId field) {
    if (!utilization_) {
      utilization_.emplace();
      utilization_code_ = api_.DeviceGetUtilizationRates == nullptr
                              ? nvml::kErrorFunctionNotFound
                              : api_.DeviceGetUtilizationRates(state_.device, &*utilization_);
    }
    return Result(
        field, utilization_code_,
        FieldValue::Int(field == fid::kGpuUtil ? utilization_->gpu : utilization_->memory));
  }

  // The fabric fields from one nvmlDeviceGetGpuFabricInfoV call per read, as DCGM reads them
  // (DcgmCacheManager.cpp, ReadFabricManagerStatusField / GetFMStatusFromStruct): the v3 struct
  // where the driver has it, else v2 (no summary); the state mapped to dcgmFabricManagerStatus_t.
  // A driver without the call: not supported (DCGM reports "NVML too old", a FAIL; Vigil judges
  // nothing it cannot read).
  FieldValue Fabric(FieldId field) {
    if (api_.DeviceGetGpuFabricInfoV == nullptr) return Unsupported();
    if (!fabric_) {
      fabric_.emplace();
      fabric_->version = nvml::kGpuFabricInfoV3Version;
      fabric_code_ = api_.DeviceGetGpuFabricInfoV(state_.device, &*fabric_);
      if (fabric_code_ == nvml::kErrorArgumentVersionMismatch) {
        nvml::GpuFabricInfoV2 v2{};
        v2.version = nvml::kGpuFabricInfoV2Version;
        fabric_code_ = api_.DeviceGetGpuFabricInfoV(state_.device,
                                                    reinterpret_cast<nvml::GpuFabricInfoV3*>(&v2));
        *fabric_ = {};
        std::memcpy(&*fabric_, &v2, sizeof(v2));
        fabric_v2_ = true;
      }
    }
    if (fabric_code_ != nvml::kSuccess) return Result(field, fabric_code_, {});
    const nvml::GpuFabricInfoV3& info = *fabric_;
    const bool supported = info.state != nvml::kGpuFabricStateNotSupported;
    switch (field) {
      case fid::kFabricManagerStatus: {
        // dcgmFabricManagerStatus_t: NotSupported 0, NotStarted 1, InProgress 2, Success 3,
        // Failure 4, Unrecognized 5.
        int64_t status = 5;
        if (info.state <= nvml::kGpuFabricStateInProgress) status = info.state;
        if (info.state == nvml::kGpuFabricStateCompleted) {
          status = info.status == nvml::kSuccess ? 3 : 4;
        }
        return FieldValue::Int(status);
      }
      case fid::kFabricManagerError:
        if (info.state != nvml::kGpuFabricStateCompleted) return Unsupported();
        return FieldValue::Int(info.status);
      case fid::kFabricHealthMask:
        return supported ? FieldValue::Int(info.health_mask) : Unsupported();
      default:  // the summary: v3 only
        return supported && !fabric_v2_ ? FieldValue::Int(info.health_summary) : Unsupported();
    }
  }

  FieldValue Memory(FieldId field) {
    if (!memory_) {
      memory_.emplace();
      memory_code_ = nvml::kErrorFunctionNotFound;
      if (api_.DeviceGetMemoryInfoV2 != nullptr) {
        memory_->version = nvml::kMemoryV2Version;
        memory_code_ = api_.DeviceGetMemoryInfoV2(state_.device, &*memory_);
      }
      if (memory_code_ != nvml::kSuccess && !IsGpuGone(memory_code_) &&
          api_.DeviceGetMemoryInfo != nullptr) {
        // An older driver: no reserved figure, and "used" includes it.
        nvml::Memory v1{};
        memory_code_ = api_.DeviceGetMemoryInfo(state_.device, &v1);
        *memory_ = {
            .version = 0, .total = v1.total, .reserved = 0, .free = v1.free, .used = v1.used};
        memory_v1_ = true;
      }
    }
    if (field == fid::kFbReserved && memory_v1_) return Unsupported();
    const auto mib = [](unsigned long long bytes) {
      return FieldValue::Int(static_cast<int64_t>(bytes / kMiB));
    };
    switch (field) {
      case fid::kFbTotal:
        return Result(field, memory_code_, mib(memory_->total));
      case fid::kFbFree:
        return Result(field, memory_code_, mib(memory_->free));
      case fid::kFbUsed:
        return Result(field, memory_code_, mib(memory_->used));
      default:
        return Result(field, memory_code_, mib(memory_->reserved));
    }
  }

  FieldValue Direct(FieldId field) {
    const auto as_int = [](auto v) { return FieldValue::Int(static_cast<int64_t>(v)); };
    switch (field) {
      case fid::kDriverVersion:
      case fid::kNvmlVersion: {
        auto fn =
            field == fid::kDriverVersion ? api_.SystemGetDriverVersion : api_.SystemGetNvmlVersion;
        if (fn == nullptr) return Unsupported();
        char buffer[nvml::kSystemVersionBufferSize] = {};
        const nvml::Return code = fn(buffer, sizeof(buffer));
        buffer[sizeof(buffer) - 1] = '\0';
        return Result(field, code, FieldValue::String(buffer));
      }
      case fid::kName:
        return StringCall(field, api_.DeviceGetName, nvml::kNameBufferSize);
      case fid::kBrand:
        return Call<int>(field, api_.DeviceGetBrand,
                         [](int brand) { return FieldValue::String(BrandName(brand)); });
      case fid::kSerial:
        return StringCall(field, api_.DeviceGetSerial, nvml::kSerialBufferSize);
      case fid::kUuid:
        return StringCall(field, api_.DeviceGetUuid, nvml::kUuidBufferSize);
      case fid::kMinorNumber:
        return UintCall(field, api_.DeviceGetMinorNumber);
      case fid::kPciBusId:
        return Call<nvml::PciInfo>(field, api_.DeviceGetPciInfo, [](const nvml::PciInfo& pci) {
          return FieldValue::String(
              std::string(pci.bus_id, strnlen(pci.bus_id, sizeof(pci.bus_id))));
        });
      case fid::kInforomConfigValid: {
        if (api_.DeviceValidateInforom == nullptr) return Unsupported();
        const nvml::Return code = api_.DeviceValidateInforom(state_.device);
        if (code == nvml::kErrorCorruptedInforom) return FieldValue::Int(0);
        return Result(field, code, FieldValue::Int(1));
      }
      case fid::kVbiosVersion:
        return StringCall(field, api_.DeviceGetVbiosVersion, nvml::kVbiosBufferSize);
      case fid::kInforomImageVersion:
        return StringCall(field, api_.DeviceGetInforomImageVersion,
                          nvml::kInforomVersionBufferSize);
      case fid::kOemInforomVersion:
      case fid::kEccInforomVersion:
      case fid::kPowerInforomVersion: {
        if (api_.DeviceGetInforomVersion == nullptr) return Unsupported();
        const int object = field == fid::kOemInforomVersion   ? nvml::kInforomOem
                           : field == fid::kEccInforomVersion ? nvml::kInforomEcc
                                                              : nvml::kInforomPower;
        char buffer[nvml::kInforomVersionBufferSize] = {};
        const nvml::Return code =
            api_.DeviceGetInforomVersion(state_.device, object, buffer, sizeof(buffer));
        return Result(field, code,
                      FieldValue::String(std::string(buffer, strnlen(buffer, sizeof(buffer)))));
      }
      case fid::kSmClock:
        return Call<unsigned int>(field, api_.DeviceGetClockInfo, as_int, nvml::kClockSm);
      case fid::kMemClock:
        return Call<unsigned int>(field, api_.DeviceGetClockInfo, as_int, nvml::kClockMem);
      case fid::kMaxSmClock:
        return Call<unsigned int>(field, api_.DeviceGetMaxClockInfo, as_int, nvml::kClockSm);
      case fid::kMaxMemClock:
        return Call<unsigned int>(field, api_.DeviceGetMaxClockInfo, as_int, nvml::kClockMem);
      case fid::kClocksEventReasons:
        // NVML's clocks event reason bits are DCGM's (both follow nvmlClocksEventReason*).
        return Call<unsigned long long>(field, api_.DeviceGetClocksEventReasons, as_int);
      case fid::kGpuTemp: {
        // nvmlDeviceGetTemperature is deprecated in NVML 13: its versioned successor first, the
        // old call where the driver lacks it, has another struct version, or not for this GPU.
        nvml::TemperatureV1 temperature{.version = nvml::kTemperatureV1Version,
                                        .sensor_type = nvml::kTemperatureGpu,
                                        .temperature = 0};
        const nvml::Return code = api_.DeviceGetTemperatureV == nullptr
                                      ? nvml::kErrorFunctionNotFound
                                      : api_.DeviceGetTemperatureV(state_.device, &temperature);
        if (code == nvml::kErrorFunctionNotFound ||
            ((code == nvml::kErrorNotSupported || code == nvml::kErrorArgumentVersionMismatch) &&
             api_.DeviceGetTemperature != nullptr)) {
          return Plausible(field, Call<unsigned int>(field, api_.DeviceGetTemperature, as_int,
                                                     nvml::kTemperatureGpu));
        }
        return Plausible(field, Result(field, code, FieldValue::Int(temperature.temperature)));
      }
      case fid::kPowerUsage:
        return Milliwatts(field, api_.DeviceGetPowerUsage);
      case fid::kPowerMgmtLimit:
        return Milliwatts(field, api_.DeviceGetPowerManagementLimit);
      case fid::kEnforcedPowerLimit:
        return Milliwatts(field, api_.DeviceGetEnforcedPowerLimit);
      case fid::kPstate:
        return Call<int>(field, api_.DeviceGetPerformanceState, [](int pstate) {
          return pstate == nvml::kPstateUnknown ? FieldValue::Error(ValueStatus::kNotSupported)
                                                : FieldValue::Int(pstate);
        });
      case fid::kFanSpeed:
        return UintCall(field, api_.DeviceGetFanSpeed);
      case fid::kGpuUtil:
      case fid::kMemCopyUtil:
        return Utilization(field);
      case fid::kEncUtil:
      case fid::kDecUtil: {
        auto fn = field == fid::kEncUtil ? api_.DeviceGetEncoderUtilization
                                         : api_.DeviceGetDecoderUtilization;
        if (fn == nullptr) return Unsupported();
        unsigned int utilization = 0;
        unsigned int period_us = 0;
        const nvml::Return code = fn(state_.device, &utilization, &period_us);
        return Result(field, code, FieldValue::Int(utilization));
      }
      case fid::kPcieMaxLinkGen:
        return UintCall(field, api_.DeviceGetMaxPcieLinkGeneration);
      case fid::kPcieMaxLinkWidth:
        return UintCall(field, api_.DeviceGetMaxPcieLinkWidth);
      case fid::kPcieLinkGen:
        return UintCall(field, api_.DeviceGetCurrPcieLinkGeneration);
      case fid::kPcieLinkWidth:
        return UintCall(field, api_.DeviceGetCurrPcieLinkWidth);
      case fid::kFbTotal:
      case fid::kFbFree:
      case fid::kFbUsed:
      case fid::kFbReserved:
        return Memory(field);
      case fid::kEccCurrent: {
        if (api_.DeviceGetEccMode == nullptr) return Unsupported();
        const auto& [code, enabled] = EccMode();
        return Result(field, code, FieldValue::Int(enabled ? 1 : 0));
      }
      case fid::kFabricManagerStatus:
      case fid::kFabricManagerError:
      case fid::kFabricHealthMask:
      case fid::kFabricHealthSummary:
        return Fabric(field);
      case fid::kMemoryUnrepairable: {
        if (api_.DeviceGetUnrepairableMemoryFlag == nullptr) return Unsupported();
        nvml::UnrepairableMemoryStatusV1 status{};
        const nvml::Return code = api_.DeviceGetUnrepairableMemoryFlag(state_.device, &status);
        return Result(field, code, FieldValue::Int(status.unrepairable_memory != 0 ? 1 : 0));
      }
      default:
        // E.g. the vGPU license status: not a thing on bare metal, and not read through NVML.
        return Unsupported();
    }
  }

  NvmlBackend& backend_;
  const nvml::Api& api_;
  const uint32_t gpu_;
  GpuState& state_;
  bool gpu_failed_ = false;
  nvml::Return failure_ = nvml::kSuccess;
  nvml::Return batched_error_ = nvml::kSuccess;
  size_t next_answer_ = 0;  // the next batched field's first answer in state_.field_values
  nvml::Return gpm_error_ = nvml::kErrorNotSupported;
  bool gpm_computed_ = false;
  std::optional<std::pair<nvml::Return, bool>> ecc_mode_;
  std::optional<nvml::Utilization> utilization_;
  nvml::Return utilization_code_ = nvml::kSuccess;
  std::optional<nvml::GpuFabricInfoV3> fabric_;
  nvml::Return fabric_code_ = nvml::kSuccess;
  bool fabric_v2_ = false;
  std::optional<nvml::MemoryV2> memory_;
  nvml::Return memory_code_ = nvml::kSuccess;
  bool memory_v1_ = false;
};

NvmlBackend::NvmlBackend(std::unique_ptr<NvmlLibrary> library, Clock* clock, NvmlResetOptions reset)
    : library_(std::move(library)),
      api_(library_->api()),
      clock_(clock),
      reset_(std::move(reset)) {}

NvmlBackend::~NvmlBackend() {
  StopEvents();
  for (auto& state : gpu_state_) FreeGpm(state.get());
}

void NvmlBackend::AllocateGpm(GpuState* state, bool gpu_supports_gpm) const {
  const bool instance = state->gpm_parent != nullptr;
  if (!gpu_supports_gpm || api_.GpmSampleAlloc == nullptr || api_.GpmSampleFree == nullptr ||
      api_.GpmMetricsGet == nullptr ||
      (instance ? api_.GpmMigSampleGet == nullptr : api_.GpmSampleGet == nullptr) ||
      api_.GpmSampleAlloc(&state->gpm_samples[0]) != nvml::kSuccess) {
    return;
  }
  if (api_.GpmSampleAlloc(&state->gpm_samples[1]) != nvml::kSuccess) {
    api_.GpmSampleFree(state->gpm_samples[0]);
    return;
  }
  state->gpm_supported = true;
  state->gpm_request = std::make_unique<nvml::GpmMetricsGet>();
}

void NvmlBackend::FreeGpm(GpuState* state) const {
  for (auto& [id, instance] : state->mig_instances) FreeGpm(instance.get());
  if (!state->gpm_supported) return;
  for (nvml::GpmSample sample : state->gpm_samples) api_.GpmSampleFree(sample);
  state->gpm_supported = false;
}

namespace {

// "1g.10gb" from a MIG device's name, "NVIDIA H100 80GB HBM3 MIG 1g.10gb" (what the device
// plugin parses too); the whole name when it has no " MIG ".
std::string MigProfileOf(const std::string& name) {
  const size_t at = name.rfind(" MIG ");
  return at == std::string::npos ? name : name.substr(at + 5);
}

// The "1g" of "1g.10gb": compute slices (sevenths of the GPU's SMs); 0 when the name is not so.
uint32_t ComputeSlicesOf(const std::string& profile) {
  const size_t g = profile.find('g');
  if (g == std::string::npos) return 0;
  return static_cast<uint32_t>(ParseUint64(profile.substr(0, g)).value_or(0));
}

}  // namespace

class NvmlBackend::DriverUse {
 public:
  explicit DriverUse(NvmlBackend* backend) : backend_(*backend) {
    absl::MutexLock lock(&backend_.driver_mutex_);
    if (backend_.driver_released_) {
      refused_ = absl::UnavailableError(
          backend_.release_error_.empty()
              ? "NVML is released while a GPU is reset"
              : fmt::format("NVML is not initialised: {}", backend_.release_error_));
      return;
    }
    ++backend_.calls_in_flight_;
  }
  ~DriverUse() {
    if (!refused_.ok()) return;
    absl::MutexLock lock(&backend_.driver_mutex_);
    --backend_.calls_in_flight_;
  }
  DriverUse(const DriverUse&) = delete;
  DriverUse& operator=(const DriverUse&) = delete;

  // OK, or why no NVML call may be made now.
  const absl::Status& status() const { return refused_; }

 private:
  NvmlBackend& backend_;
  absl::Status refused_;
};

absl::StatusOr<MigState> NvmlBackend::ReadMig(uint32_t gpu) {
  absl::StatusOr<MigState> mig;
  bool changed = false;
  {
    DriverUse use(this);
    if (!use.status().ok()) return use.status();
    const auto layout = [&] {
      std::vector<std::pair<uint32_t, std::string>> instances;
      for (const auto& [id, instance] : gpu_state_[gpu]->mig_instances) {
        instances.emplace_back(id, instance->mig_uuid);
      }
      return instances;
    };
    const auto before = layout();
    mig = ReadMigUnguarded(gpu);
    changed = mig.ok() && layout() != before;
  }
  // A MIG reconfiguration leaves the GPU's XID registration stale (DCGM registers again on the
  // driver's MIG-change notice). Where the driver sends that notice the event thread has made its
  // set anew already; elsewhere it is asked to, at its next wake — not here, on the GPU's reading
  // worker, where joining the event thread could outlast the read's deadline.
  if (changed) {
    absl::MutexLock lock(&event_mutex_);
    if (gpu >= mig_events_.size() || !mig_events_[gpu]) rebuild_events_ = true;
  }
  return mig;
}

absl::StatusOr<MigState> NvmlBackend::ReadMigUnguarded(uint32_t gpu) {
  GpuState& state = *gpu_state_[gpu];
  MigState mig;
  std::map<uint32_t, std::unique_ptr<GpuState>> found;  // the instances now, by id
  const auto finish = [&] {
    // What is left was not found again (gone, or recreated with a new handle).
    for (auto& [id, gone] : state.mig_instances) FreeGpm(gone.get());
    state.mig_instances = std::move(found);
    std::sort(mig.instances.begin(), mig.instances.end(),
              [](const MigInstance& a, const MigInstance& b) {
                return std::tie(a.placement_start, a.gpu_instance_id) <
                       std::tie(b.placement_start, b.gpu_instance_id);
              });
    return mig;
  };
  // A failure part way keeps the instances known before (and frees those made since).
  const auto failed = [&](const char* call, nvml::Return code) {
    for (auto& [id, instance] : found) {
      if (!state.mig_instances.try_emplace(id, std::move(instance)).second) {
        FreeGpm(instance.get());
      }
    }
    return absl::Status(
        IsGpuGone(code) ? absl::StatusCode::kUnavailable : absl::StatusCode::kInternal,
        fmt::format("{}: {}", call, library_->ErrorString(code)));
  };
  if (state.device == nullptr || api_.DeviceGetMigMode == nullptr) return finish();
  unsigned int current = 0, pending = 0;
  nvml::Return code = api_.DeviceGetMigMode(state.device, &current, &pending);
  if (code == nvml::kErrorNotSupported || code == nvml::kErrorFunctionNotFound) return finish();
  if (code != nvml::kSuccess) return failed("nvmlDeviceGetMigMode", code);
  if (current != nvml::kDeviceMigEnable) return finish();
  mig.mode = true;
  if (api_.DeviceGetMaxMigDeviceCount == nullptr ||
      api_.DeviceGetMigDeviceHandleByIndex == nullptr || api_.DeviceGetGpuInstanceId == nullptr) {
    return finish();
  }
  unsigned int max_devices = 0;
  code = api_.DeviceGetMaxMigDeviceCount(state.device, &max_devices);
  if (code != nvml::kSuccess) return failed("nvmlDeviceGetMaxMigDeviceCount", code);
  for (unsigned int index = 0; index < max_devices; ++index) {
    nvml::Device handle = nullptr;
    code = api_.DeviceGetMigDeviceHandleByIndex(state.device, index, &handle);
    if (code == nvml::kErrorNotFound) continue;  // an empty slot
    if (code != nvml::kSuccess) return failed("nvmlDeviceGetMigDeviceHandleByIndex", code);
    MigInstance instance;
    code = api_.DeviceGetGpuInstanceId(handle, &instance.gpu_instance_id);
    if (code != nvml::kSuccess) return failed("nvmlDeviceGetGpuInstanceId", code);
    // A GPU instance split into several compute instances has a MIG device per compute
    // instance: the first stands for its GPU instance (Vigil models one per GPU instance).
    if (found.contains(instance.gpu_instance_id)) continue;
    if (api_.DeviceGetComputeInstanceId != nullptr) {
      (void)api_.DeviceGetComputeInstanceId(handle, &instance.compute_instance_id);
    }
    // Its UUID names it (and its history in the engine): a MIG device that cannot say it is not
    // taken as a layout.
    char uuid[nvml::kUuidBufferSize] = {};
    code = api_.DeviceGetUuid == nullptr ? nvml::kErrorFunctionNotFound
                                         : api_.DeviceGetUuid(handle, uuid, sizeof(uuid));
    if (code != nvml::kSuccess) return failed("nvmlDeviceGetUUID of a MIG device", code);
    instance.uuid = std::string(uuid, strnlen(uuid, sizeof(uuid)));
    if (instance.uuid.empty())
      return failed("nvmlDeviceGetUUID of a MIG device", nvml::kErrorUnknown);
    // The instance's own state, kept while the same instance stays (same handle and UUID: a
    // recreated instance starts its GPM samples afresh).
    auto kept = state.mig_instances.find(instance.gpu_instance_id);
    std::unique_ptr<GpuState> instance_state;
    if (kept != state.mig_instances.end() && kept->second->device == handle &&
        kept->second->mig_uuid == instance.uuid) {
      instance_state = std::move(kept->second);
      state.mig_instances.erase(kept);
    } else {
      instance_state = std::make_unique<GpuState>();
      instance_state->device = handle;
      instance_state->gpm_parent = state.device;
      instance_state->gpm_gpu_instance = instance.gpu_instance_id;
      instance_state->mig_uuid = instance.uuid;
      AllocateGpm(instance_state.get(), state.gpm_supported);
    }
    Reader reader(this, gpu, instance_state.get());
    instance.profile = MigProfileOf(reader.Text(fid::kName));
    instance.compute_slices = ComputeSlicesOf(instance.profile);
    if (FieldValue total = reader.Field(fid::kFbTotal); total.ok()) {
      instance.memory_total_mib = static_cast<uint64_t>(total.as_int());
    }
    nvml::GpuInstance gpu_instance = nullptr;
    nvml::GpuInstanceInfo info{};
    if (api_.DeviceGetGpuInstanceById != nullptr && api_.GpuInstanceGetInfo != nullptr &&
        api_.DeviceGetGpuInstanceById(state.device, instance.gpu_instance_id, &gpu_instance) ==
            nvml::kSuccess &&
        api_.GpuInstanceGetInfo(gpu_instance, &info) == nvml::kSuccess) {
      instance.placement_start = info.placement.start;
      instance.placement_size = info.placement.size;
    }
    if (reader.gpu_failed()) {
      found.emplace(instance.gpu_instance_id, std::move(instance_state));
      return failed("reading a MIG device", reader.failure());
    }
    found.emplace(instance.gpu_instance_id, std::move(instance_state));
    mig.instances.push_back(std::move(instance));
  }
  return finish();
}

absl::Status NvmlBackend::ReadInstance(uint32_t gpu, const MigInstance& instance,
                                       absl::Span<const FieldId> fields, absl::Time now,
                                       absl::Span<FieldValue> out) {
  (void)now;
  DriverUse use(this);
  if (!use.status().ok()) return use.status();
  GpuState& state = *gpu_state_[gpu];
  auto it = state.mig_instances.find(instance.gpu_instance_id);
  if (it == state.mig_instances.end()) {
    return absl::NotFoundError(
        fmt::format("GPU {} has no GPU instance {} any more", gpu, instance.gpu_instance_id));
  }
  Reader reader(this, gpu, it->second.get());
  reader.FetchGpm(fields);
  for (size_t i = 0; i < fields.size() && !reader.gpu_failed(); ++i) {
    out[i] = SampledPerMigInstance(fields[i]) ? reader.Field(fields[i])
                                              : FieldValue::Error(ValueStatus::kNotSupported);
  }
  if (reader.gpu_failed()) return WholeGpuFailure(reader.failure());
  return absl::OkStatus();
}

absl::Status NvmlBackend::WholeGpuFailure(nvml::Return code) const {
  if (code == nvml::kErrorResetRequired) {
    return absl::FailedPreconditionError(
        fmt::format("NVML says the GPU needs a reset: {}", library_->ErrorString(code)));
  }
  return absl::UnavailableError(
      fmt::format("NVML says the GPU is lost: {}", library_->ErrorString(code)));
}

absl::StatusOr<std::unique_ptr<NvmlBackend>> NvmlBackend::Create(
    std::unique_ptr<NvmlLibrary> library, Clock* clock, NvmlResetOptions reset) {
  if (absl::Status valid = ValidateResetCommand(reset.command); !valid.ok()) return valid;
  std::unique_ptr<NvmlBackend> backend(
      new NvmlBackend(std::move(library), clock, std::move(reset)));
  const nvml::Api& api = backend->api_;
  const unsigned int count = backend->library_->device_count();
  std::string driver_version;
  if (api.SystemGetDriverVersion != nullptr) {
    char buffer[nvml::kSystemVersionBufferSize] = {};
    if (api.SystemGetDriverVersion(buffer, sizeof(buffer)) == nvml::kSuccess) {
      buffer[sizeof(buffer) - 1] = '\0';
      driver_version = buffer;
    }
  }
  backend->process_info_size_ =
      nvml::ProcessInfoSize(driver_version, api.compute_running_processes_v3);
  if (backend->process_info_size_ != sizeof(nvml::ProcessInfo)) {
    spdlog::info(
        "NVML: driver {} lists compute processes in {}-byte entries (nvmlProcessInfo_v3_t), not "
        "nvml.h's {}: read as such",
        driver_version, backend->process_info_size_, sizeof(nvml::ProcessInfo));
  }
  unsigned int hidden = 0;  // GPUs this process may not open
  for (unsigned int nvml_index = 0; nvml_index < count; ++nvml_index) {
    nvml::Device device = nullptr;
    const nvml::Return opened = api.DeviceGetHandleByIndex(nvml_index, &device);
    if (opened == nvml::kErrorNoPermission) {
      // A GPU this process may not use (a container's device cgroup hides its device node):
      // DCGM marks it inaccessible and leaves it out (NvmlTaskRunner.cpp); reporting it as
      // fallen off the bus was a false FAIL and a false reboot.
      ++hidden;
      spdlog::info(
          "NVML GPU {}: this process may not open it ({}): not monitored here (a container sees "
          "only the GPUs given to it)",
          nvml_index, backend->library_->ErrorString(opened));
      continue;
    }
    const uint32_t index = static_cast<uint32_t>(backend->gpu_state_.size());
    backend->gpu_state_.push_back(std::make_unique<GpuState>());
    GpuState& state = *backend->gpu_state_.back();
    state.nvml_index = nvml_index;
    GpuIdentity identity{.index = index, .driver_version = driver_version};
    if (opened != nvml::kSuccess) {
      state.open_error = backend->library_->ErrorString(opened);
      identity.name = "unavailable";
      spdlog::error(
          "NVML cannot open GPU {}: {}; it is reported as lost (restart the engine once the "
          "driver sees it again)",
          nvml_index, state.open_error);
      backend->identities_.push_back(std::move(identity));
      continue;
    }
    state.device = device;
    Reader reader(backend.get(), index);
    identity.name = reader.Text(fid::kName);
    identity.uuid = reader.Text(fid::kUuid);
    identity.serial = reader.Text(fid::kSerial);
    identity.pci_bus_id = reader.Text(fid::kPciBusId);
    if (FieldValue total = reader.Field(fid::kFbTotal); total.ok()) {
      identity.memory_total_mib = static_cast<uint64_t>(total.as_int());
    }
    if (FieldValue minor = reader.Field(fid::kMinorNumber); minor.ok()) {
      identity.device = fmt::format("nvidia{}", minor.as_int());
    }
    nvml::GpmSupport support{.version = nvml::kGpmSupportVersion, .is_supported_device = 0};
    backend->AllocateGpm(&state,
                         api.GpmQueryDeviceSupport != nullptr &&
                             api.GpmQueryDeviceSupport(state.device, &support) == nvml::kSuccess &&
                             support.is_supported_device != 0);
    if (absl::StatusOr<MigState> mig = backend->ReadMigUnguarded(index); mig.ok()) {
      identity.mig = *std::move(mig);
    } else {
      spdlog::warn("GPU {}: its MIG state cannot be read ({}); taken as MIG off until it can",
                   index, MessageOf(mig.status()));
    }
    spdlog::info("GPU {}: {} {} {}{}", index, identity.name, identity.uuid, identity.pci_bus_id,
                 state.gpm_supported ? " (with GPM profiling metrics)" : "");
    backend->identities_.push_back(std::move(identity));
  }
  if (backend->identities_.empty()) {
    return absl::FailedPreconditionError(fmt::format(
        "NVML lists {} GPU{} but this process may open none of them (Insufficient Permissions): "
        "in a container, request GPUs from the device plugin or set NVIDIA_VISIBLE_DEVICES",
        hidden, hidden == 1 ? "" : "s"));
  }
  return backend;
}

absl::Status NvmlBackend::Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                               absl::Span<FieldValue> out) {
  (void)now;  // NVML reports the current state; there is nothing to simulate up to `now`
  DriverUse use(this);
  if (!use.status().ok()) return use.status();
  GpuState& state = *gpu_state_[gpu];
  if (state.device == nullptr && !TryReopen(gpu)) {
    return absl::UnavailableError(fmt::format("NVML could not open it: {}", state.open_error));
  }
  Reader reader(this, gpu);
  reader.FetchBatched(fields);
  reader.FetchGpm(fields);
  for (size_t i = 0; i < fields.size() && !reader.gpu_failed(); ++i) {
    out[i] = reader.Field(fields[i]);
  }
  if (reader.gpu_failed()) return WholeGpuFailure(reader.failure());
  return absl::OkStatus();
}

namespace {

// {index} is NVML's index (nvidia-smi -i takes it), which differs from the engine's GPU number
// when GPUs this process may not open are left out.
std::vector<std::pair<std::string, std::string>> ResetPlaceholders(const GpuIdentity& gpu,
                                                                   unsigned int nvml_index) {
  return {
      {"uuid", gpu.uuid}, {"index", std::to_string(nvml_index)}, {"pci_bus_id", gpu.pci_bus_id}};
}

}  // namespace

absl::Status ValidateResetCommand(const std::string& command) {
  const GpuIdentity example{.index = 0, .uuid = "GPU-0", .pci_bus_id = "00000000:00:00.0"};
  auto argv = ExpandCommand(command, ResetPlaceholders(example, 0));
  if (!argv.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--gpu-reset-command: {}", MessageOf(argv.status())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<GpuProcess>> NvmlBackend::ReadProcesses(uint32_t gpu) {
  DriverUse use(this);
  if (!use.status().ok()) return use.status();
  GpuState& state = *gpu_state_[gpu];
  if (state.device == nullptr) {
    return absl::UnavailableError(fmt::format("NVML could not open it: {}", state.open_error));
  }
  if (api_.DeviceGetComputeRunningProcesses == nullptr) {
    return absl::UnimplementedError(
        "this NVML cannot list a GPU's compute processes (no "
        "nvmlDeviceGetComputeRunningProcesses_v2/_v3): a reset cannot be proven safe");
  }
  // In MIG mode the GPU's handle answers for every instance only to a privileged caller
  // (nvml.h): each MIG device's handle is asked too, so a busy instance is never missed.
  std::vector<std::pair<nvml::Device, int32_t>> devices = {{state.device, -1}};
  for (const auto& [id, instance] : state.mig_instances) {
    devices.emplace_back(instance->device, static_cast<int32_t>(id));
  }
  std::map<uint32_t, GpuProcess> by_pid;
  for (const auto& [device, gpu_instance] : devices) {
    absl::StatusOr<std::vector<GpuProcess>> listed = ProcessesOf(device);
    if (!listed.ok() && listed.status().code() == absl::StatusCode::kPermissionDenied &&
        device == state.device && devices.size() > 1) {
      continue;  // unprivileged, in MIG mode: the instances' handles answer for themselves
    }
    if (!listed.ok()) return listed.status();
    for (GpuProcess& process : *listed) {
      if (gpu_instance >= 0) process.gpu_instance = gpu_instance;  // the handle's instance
      // A process the GPU's handle and its instance's both list: the entry that names the
      // instance wins.
      auto [it, added] = by_pid.try_emplace(process.pid, process);
      if (!added && it->second.gpu_instance < 0) it->second = process;
    }
  }
  // Per-process utilisation is the whole GPU's to say (not a MIG instance's, nvml.h).
  if (state.mig_instances.empty()) {
    if (const auto util = SmUtilOf(state.device)) {
      for (auto& [pid, process] : by_pid) {
        const auto sampled = util->find(pid);
        // A process with no sample in the driver's window did not run on the SMs: 0.
        process.sm_util = sampled != util->end() ? sampled->second : 0;
      }
    }
  }
  std::vector<GpuProcess> processes;
  for (auto& [pid, process] : by_pid) processes.push_back(process);
  return processes;
}

std::optional<std::map<uint32_t, uint32_t>> NvmlBackend::SmUtilOf(nvml::Device device) {
  if (api_.DeviceGetProcessUtilization == nullptr) return std::nullopt;
  std::vector<nvml::ProcessUtilizationSample> samples(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(samples.size());
    const nvml::Return code = api_.DeviceGetProcessUtilization(device, samples.data(), &count, 0);
    if (code == nvml::kErrorInsufficientSize) {
      samples.resize(std::max<size_t>(count + 8, samples.size() * 2));
      continue;
    }
    if (code == nvml::kErrorNotFound) return std::map<uint32_t, uint32_t>();  // no samples
    if (code != nvml::kSuccess) return std::nullopt;
    std::map<uint32_t, std::pair<unsigned long long, uint32_t>> latest;  // pid -> (stamp, util)
    for (size_t i = 0; i < count && i < samples.size(); ++i) {
      auto& [stamp, util] = latest[samples[i].pid];
      if (samples[i].time_stamp >= stamp) {
        stamp = samples[i].time_stamp;
        util = samples[i].sm_util;
      }
    }
    std::map<uint32_t, uint32_t> util;
    for (const auto& [pid, sample] : latest) util[pid] = sample.second;
    return util;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<GpuProcess>> NvmlBackend::ProcessesOf(nvml::Device device) {
  // The list can grow between the two calls: ask again with the size NVML reported. Room for
  // the larger entry whatever the driver: a driver that writes more than nvml.h says can
  // misplace fields, never write past the buffer.
  constexpr size_t kWords = nvml::kProcessInfoCcSize / sizeof(uint64_t);
  static_assert(sizeof(nvml::ProcessInfo) <= nvml::kProcessInfoCcSize);
  size_t capacity = 8;
  std::vector<uint64_t> buffer(capacity * kWords);  // 8-byte aligned, as ProcessInfo needs
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(capacity);
    const nvml::Return code = api_.DeviceGetComputeRunningProcesses(
        device, &count, reinterpret_cast<nvml::ProcessInfo*>(buffer.data()));
    if (code == nvml::kErrorInsufficientSize) {
      capacity = std::max<size_t>(count + 8, capacity * 2);
      buffer.assign(capacity * kWords, 0);
      continue;
    }
    if (IsWholeGpuFailure(code)) return WholeGpuFailure(code);
    if (code == nvml::kErrorNoPermission) {
      return absl::PermissionDeniedError(fmt::format(
          "NVML cannot list the GPU's compute processes: {} (the engine needs CAP_SYS_ADMIN)",
          library_->ErrorString(code)));
    }
    if (code != nvml::kSuccess) {
      return absl::InternalError(fmt::format("NVML cannot list the GPU's compute processes: {}",
                                             library_->ErrorString(code)));
    }
    std::vector<GpuProcess> processes;
    const auto* bytes = reinterpret_cast<const unsigned char*>(buffer.data());
    for (size_t i = 0; i < count && i < capacity; ++i) {
      nvml::ProcessInfo entry;  // the fields nvml.h names lead either entry
      std::memcpy(&entry, bytes + i * process_info_size_, sizeof(entry));
      GpuProcess& process = processes.emplace_back(GpuProcess{.pid = entry.pid});
      if (entry.used_gpu_memory != nvml::kValueNotAvailable) {
        process.used_memory_bytes = entry.used_gpu_memory;
      }
      // 0xFFFFFFFF: not in a MIG instance (nvml.h's "invalid" id).
      if (entry.gpu_instance_id != 0xFFFFFFFFu) {
        process.gpu_instance = static_cast<int32_t>(entry.gpu_instance_id);
      }
    }
    return processes;
  }
  return absl::InternalError("NVML's list of compute processes kept growing; try again");
}

absl::StatusOr<std::string> NvmlBackend::ResetGpu(uint32_t gpu) {
  auto argv = ExpandCommand(reset_.command,
                            ResetPlaceholders(identities_[gpu], gpu_state_[gpu]->nvml_index));
  if (!argv.ok()) return argv.status();  // validated at Create: not expected
  // The driver refuses a reset while any process holds NVML initialised (nvidia-smi: "In use by
  // another client … a monitoring application"; NVIDIA/NVSentinel#1690): DCGM detaches from the
  // driver around it (DcgmHostEngineHandler.cpp, dcgmDetachDriver / dcgmAttachDriver), and so
  // does the engine. It pauses its reads meanwhile (Engine::ResetGpu).
  absl::MutexLock control(&events_control_mutex_);
  if (absl::Status released = ReleaseDriver(); !released.ok()) return released;
  auto run = RunSubprocess(*argv, reset_.limit);
  const absl::Status attached = AttachDriver();
  if (!run.ok()) return run.status();
  if (run->timed_out) {
    return absl::FailedPreconditionError(
        fmt::format("the reset command ({}) did not finish in {} and was killed: {}",
                    reset_.command, absl::FormatDuration(reset_.limit), FirstLine(run->output)));
  }
  if (run->exit_code != 0) {
    return absl::FailedPreconditionError(
        fmt::format("the reset command ({}) failed with exit code {}: {}", reset_.command,
                    run->exit_code, FirstLine(run->output)));
  }
  if (!attached.ok()) {
    return absl::InternalError(fmt::format(
        "the GPU was reset, but {}: every GPU reads as lost until the engine is restarted",
        MessageOf(attached)));
  }
  return run->output;
}

absl::Status NvmlBackend::ReleaseDriver() {
  // A read that started before the engine paused (a worker the read deadline gave up on) may
  // still be in the driver: wait for it a while, and never shut NVML down under it.
  constexpr absl::Duration kCallsWait = absl::Seconds(10);
  {
    absl::MutexLock lock(&driver_mutex_);
    driver_released_ = true;  // no new call starts
    release_error_.clear();
    const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(driver_mutex_) {
      return calls_in_flight_ == 0;
    };
    if (!driver_mutex_.AwaitWithTimeout(absl::Condition(&idle), kCallsWait)) {
      driver_released_ = false;
      return absl::FailedPreconditionError(fmt::format(
          "{} call(s) into the driver have not returned in {}: NVML cannot be released for the "
          "reset, so it is not attempted (a driver that hangs needs the node rebooted)",
          calls_in_flight_, absl::FormatDuration(kCallsWait)));
    }
  }
  resume_events_ = event_thread_.joinable() ? sink_ : nullptr;
  StopEventsLocked();
  for (auto& state : gpu_state_) {
    FreeGpm(state.get());  // and its instances': samples are NVML's, gone with it
    state->mig_instances.clear();
    state->gpm_have_previous = false;
    state->nvlink_previous.clear();
  }
  library_->Release();
  spdlog::info("NVML released for a GPU reset");
  return absl::OkStatus();
}

absl::Status NvmlBackend::AttachDriver() {
  if (absl::Status init = library_->Acquire(); !init.ok()) {
    spdlog::error("after the GPU reset, {}: every GPU reads as lost until the engine restarts",
                  MessageOf(init));
    absl::MutexLock lock(&driver_mutex_);
    release_error_ = fmt::format("{} after a GPU reset; restart the engine", MessageOf(init));
    return init;
  }
  // Handles from before are void. Each GPU is opened again and must be the same GPU (its UUID):
  // NVML's order follows the PCI bus, but a GPU that did not come back must not lend its number
  // to another.
  for (uint32_t gpu = 0; gpu < gpu_state_.size(); ++gpu) {
    GpuState& state = *gpu_state_[gpu];
    const std::string& uuid = identities_[gpu].uuid;
    state.device = nullptr;
    if (uuid.empty()) continue;  // never opened: it keeps its error from the start
    state.device = FindByUuid(uuid, &state.nvml_index);
    if (state.device == nullptr) {
      state.open_error = "not found again after a GPU reset";
      spdlog::error("GPU {} ({}): NVML does not list it again after the reset; it reads as lost",
                    gpu, uuid);
      continue;
    }
    state.open_error.clear();
    nvml::GpmSupport support{.version = nvml::kGpmSupportVersion, .is_supported_device = 0};
    AllocateGpm(&state, api_.GpmQueryDeviceSupport != nullptr &&
                            api_.GpmQueryDeviceSupport(state.device, &support) == nvml::kSuccess &&
                            support.is_supported_device != 0);
    if (absl::StatusOr<MigState> mig = ReadMigUnguarded(gpu); !mig.ok()) {
      spdlog::warn("GPU {}: its MIG state cannot be read after the reset ({})", gpu,
                   MessageOf(mig.status()));
    }
  }
  {
    absl::MutexLock lock(&driver_mutex_);
    driver_released_ = false;
  }
  if (resume_events_ != nullptr) StartEventsLocked(resume_events_);
  spdlog::info("NVML initialised again after the GPU reset; XID events registered anew");
  return absl::OkStatus();
}

nvml::Device NvmlBackend::FindByUuid(const std::string& uuid, unsigned int* nvml_index) const {
  unsigned int count = 0;
  if (api_.DeviceGetCount != nullptr) api_.DeviceGetCount(&count);
  for (unsigned int offset = 0; offset < count; ++offset) {
    const unsigned int index = (*nvml_index + offset) % count;  // its own index first
    nvml::Device device = nullptr;
    if (api_.DeviceGetHandleByIndex(index, &device) != nvml::kSuccess) continue;
    char text[nvml::kUuidBufferSize] = {};
    if (api_.DeviceGetUuid == nullptr ||
        api_.DeviceGetUuid(device, text, sizeof(text)) != nvml::kSuccess) {
      continue;
    }
    if (std::string(text, strnlen(text, sizeof(text))) == uuid) {
      *nvml_index = index;
      return device;
    }
  }
  return nullptr;
}

bool NvmlBackend::TryReopen(uint32_t gpu) {
  GpuState& state = *gpu_state_[gpu];
  const absl::Time now = clock_->Now();
  if (now < state.next_open) return false;
  state.next_open = now + kReopenInterval;
  const std::string& uuid = identities_[gpu].uuid;
  if (uuid.empty()) {
    // Never opened: its UUID, bus id and name were never known, and the engine's GPU list is
    // fixed at start (its clients' labels and histories hang on it).
    nvml::Device device = nullptr;
    if (state.said_opens_now ||
        api_.DeviceGetHandleByIndex(state.nvml_index, &device) != nvml::kSuccess) {
      return false;
    }
    state.said_opens_now = true;
    state.open_error =
        fmt::format("{}; NVML opens it now: restart the engine to monitor it", state.open_error);
    spdlog::warn(
        "NVML GPU {} (engine GPU {}) opens now, but could not when the engine started: "
        "restart the engine to monitor it",
        state.nvml_index, gpu);
    return false;
  }
  const nvml::Device device = FindByUuid(uuid, &state.nvml_index);
  if (device == nullptr) return false;
  state.device = device;
  state.open_error.clear();
  nvml::GpmSupport support{.version = nvml::kGpmSupportVersion, .is_supported_device = 0};
  AllocateGpm(&state, api_.GpmQueryDeviceSupport != nullptr &&
                          api_.GpmQueryDeviceSupport(device, &support) == nvml::kSuccess &&
                          support.is_supported_device != 0);
  (void)ReadMigUnguarded(gpu);  // the engine's MIG poll reads it too, and says when it fails
  {
    absl::MutexLock lock(&event_mutex_);
    rebuild_events_ = true;  // its XIDs, on the event thread
  }
  spdlog::warn("GPU {} ({}): NVML opens it again; monitored again", gpu, uuid);
  return true;
}

void NvmlBackend::StartEvents(EventSink* sink) {
  absl::MutexLock control(&events_control_mutex_);
  StartEventsLocked(sink);
}

void NvmlBackend::StopEvents() {
  absl::MutexLock control(&events_control_mutex_);
  StopEventsLocked();
}

void NvmlBackend::StartEventsLocked(EventSink* sink) {
  if (event_thread_.joinable()) return;
  if (api_.EventSetCreate == nullptr || api_.DeviceRegisterEvents == nullptr ||
      api_.EventSetWait == nullptr || api_.EventSetFree == nullptr) {
    spdlog::warn("this NVML has no event API: XIDs cannot be seen (field 230 stays empty)");
    return;
  }
  size_t registered = 0;
  const nvml::EventSet set = MakeEventSet(/*log=*/true, &registered);
  if (set == nullptr) return;
  sink_ = sink;
  {
    absl::MutexLock lock(&event_mutex_);
    events_stopping_ = false;
  }
  event_thread_ =
      StartNamedThread("vigil-nvml-xid", [this, set, registered] { RunEvents(set, registered); });
}

nvml::EventSet NvmlBackend::MakeEventSet(bool log, size_t* registered) {
  *registered = 0;
  nvml::EventSet set = nullptr;
  if (const nvml::Return code = api_.EventSetCreate(&set); code != nvml::kSuccess) {
    if (log) {
      spdlog::error("NVML cannot create an event set ({}): XIDs cannot be seen",
                    library_->ErrorString(code));
    }
    return nullptr;
  }
  std::vector<bool> refused(gpu_state_.size(), false);
  for (uint32_t gpu = 0; gpu < gpu_state_.size(); ++gpu) {
    const nvml::Device device = gpu_state_[gpu]->device;
    if (device == nullptr || refused[gpu]) continue;
    unsigned long long supported = nvml::kEventTypeXidCriticalError;
    if (api_.DeviceGetSupportedEventTypes != nullptr &&
        api_.DeviceGetSupportedEventTypes(device, &supported) != nvml::kSuccess) {
      supported = 0;
    }
    if ((supported & nvml::kEventTypeXidCriticalError) == 0) {
      if (log) spdlog::warn("GPU {}: the driver does not report XID events for it", gpu);
      continue;
    }
    const nvml::Return code =
        api_.DeviceRegisterEvents(device, nvml::kEventTypeXidCriticalError, set);
    if (code == nvml::kErrorUnknown) {
      // The driver leaves the set undefined after an UNKNOWN (DCGM works around it the same
      // way): a new set, and every GPU but this one registered again.
      if (log) {
        spdlog::error(
            "GPU {}: cannot register for XID events: {}; registering the others again "
            "on a new event set",
            gpu, library_->ErrorString(code));
      }
      refused[gpu] = true;
      api_.EventSetFree(set);
      set = nullptr;
      if (const nvml::Return again = api_.EventSetCreate(&set); again != nvml::kSuccess) {
        if (log) {
          spdlog::error("NVML cannot create an event set ({}): XIDs cannot be seen",
                        library_->ErrorString(again));
        }
        return nullptr;
      }
      *registered = 0;
      gpu = static_cast<uint32_t>(-1);  // from the first GPU again (++ makes it 0)
      continue;
    }
    if (code != nvml::kSuccess) {
      if (log) {
        spdlog::error("GPU {}: cannot register for XID events: {}", gpu,
                      library_->ErrorString(code));
      }
      continue;
    }
    ++*registered;
  }
  // MIG-change events, apart from the XIDs as DCGM registers them (DcgmCacheManager.cpp,
  // ManageDeviceEvents): a driver that predates them answers NOT_SUPPORTED, and the GPU's MIG
  // layout is then noticed by the engine's periodic poll alone.
  std::vector<bool> mig_events(gpu_state_.size(), false);
  for (uint32_t gpu = 0; set != nullptr && gpu < gpu_state_.size(); ++gpu) {
    const nvml::Device device = gpu_state_[gpu]->device;
    unsigned long long supported = 0;
    if (device == nullptr || refused[gpu] || api_.DeviceGetSupportedEventTypes == nullptr ||
        api_.DeviceGetSupportedEventTypes(device, &supported) != nvml::kSuccess ||
        (supported & nvml::kEventMigConfigChange) == 0) {
      continue;
    }
    const nvml::Return code = api_.DeviceRegisterEvents(device, nvml::kEventMigConfigChange, set);
    if (code == nvml::kSuccess) {
      mig_events[gpu] = true;
    } else if (code != nvml::kErrorNotSupported && log) {
      spdlog::warn("GPU {}: cannot register for MIG-change events ({}); its MIG layout is polled",
                   gpu, library_->ErrorString(code));
    }
  }
  {
    absl::MutexLock lock(&event_mutex_);
    mig_events_ = std::move(mig_events);
  }
  if (*registered == 0) {
    api_.EventSetFree(set);
    return nullptr;
  }
  return set;
}

void NvmlBackend::RemakeEventSet(nvml::EventSet* set, size_t* registered, const std::string& why) {
  if (*set != nullptr) api_.EventSetFree(*set);
  *set = MakeEventSet(/*log=*/false, registered);
  spdlog::info("{}: XID events registered anew for {} GPU(s)", why, *registered);
}

void NvmlBackend::StopEventsLocked() {
  if (!event_thread_.joinable()) return;
  {
    absl::MutexLock lock(&event_mutex_);
    events_stopping_ = true;
  }
  event_thread_.join();
}

void NvmlBackend::RunEvents(nvml::EventSet set, size_t registered) {
  // The wait's timeout bounds how long StopEvents() takes.
  constexpr unsigned int kWaitMs = 200;
  nvml::Return last_error = nvml::kSuccess;
  for (;;) {
    bool rebuild = false;
    {
      absl::MutexLock lock(&event_mutex_);
      if (events_stopping_) break;
      rebuild = std::exchange(rebuild_events_, false);
    }
    if (rebuild) RemakeEventSet(&set, &registered, "a GPU's MIG layout changed");
    nvml::Return code = nvml::kErrorGpuIsLost;
    nvml::EventData data{};
    if (set != nullptr) {
      code = api_.EventSetWait(set, &data, kWaitMs);
      if (code == nvml::kErrorTimeout) continue;
    }
    if (code == nvml::kErrorGpuIsLost) {
      // A registered GPU that fell off the bus can make every wait on the set fail (nvml.h),
      // which would silence the other GPUs' XIDs: a new set, the lost GPU's registration refused.
      if (set != nullptr) api_.EventSetFree(set);
      const size_t before = registered;
      set = MakeEventSet(/*log=*/false, &registered);
      if (registered != before) {
        spdlog::warn(
            "waiting for NVML events failed: a GPU registered for XIDs is lost; listening again "
            "for the {} GPU(s) that still register",
            registered);
      }
      if (set != nullptr) continue;
    }
    if (code != nvml::kSuccess) {
      // Another failure (or no GPU registers any more): the reads report GPUs' states; here,
      // wait and try again rather than spin.
      if (code != last_error) {
        spdlog::error("waiting for NVML events failed: {}; still listening",
                      library_->ErrorString(code));
        last_error = code;
      }
      absl::MutexLock lock(&event_mutex_);
      event_mutex_.AwaitWithTimeout(absl::Condition(&events_stopping_), absl::Seconds(1));
      continue;
    }
    last_error = nvml::kSuccess;
    uint32_t gpu = 0;
    while (gpu < gpu_state_.size() && gpu_state_[gpu]->device != data.device) ++gpu;
    if ((data.event_type & nvml::kEventMigConfigChange) != 0) {
      // The engine reads the layouts at its next tick; the GPU's registrations are made anew now.
      mig_change_noticed_.store(true, std::memory_order_release);
      RemakeEventSet(&set, &registered,
                     fmt::format("GPU {}: the driver reports a MIG reconfiguration", gpu));
      continue;
    }
    if ((data.event_type & nvml::kEventTypeXidCriticalError) == 0) continue;
    if (gpu == gpu_state_.size()) {
      spdlog::error("NVML reported XID {} for a GPU it did not list at start; ignored",
                    data.event_data);
      continue;
    }
    // The instance ids are 0xFFFFFFFF when the GPU is not in MIG mode (or NVML cannot tell).
    constexpr unsigned int kNoInstance = 0xFFFFFFFFu;
    XidEvent event{.gpu = gpu,
                   .xid = static_cast<uint32_t>(data.event_data),
                   .time = clock_->Now(),
                   .injected = false};
    if (data.gpu_instance_id != kNoInstance) event.gpu_instance = data.gpu_instance_id;
    if (data.compute_instance_id != kNoInstance) {
      event.compute_instance = data.compute_instance_id;
    }
    sink_->OnXid(event);
  }
  if (set != nullptr) api_.EventSetFree(set);
}

}  // namespace vigil
