// One sampled field value with its status and provenance, as the engine stores and serves it.
// A plain value type: copy freely; no synchronisation of its own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace vigil {

// DCGM's numeric field ID (DCGM_FI_DEV_GPU_TEMP = 150, ...). These never change across versions.
using FieldId = uint32_t;

enum class FieldType : uint8_t { kInt64, kDouble, kString };

// Why a value is (or is not) there. Anything but kOk carries no value.
enum class ValueStatus : uint8_t {
  kOk,
  kNotSupported,  // this GPU or driver cannot provide the field
  kGpuLost,       // the GPU stopped answering
  kReadError,     // the read failed for another reason
  kNoPermission,
  kTimeout,  // the driver call did not return in time
  kNoData,   // never sampled
  // The driver will not serve the GPU until it is reset (NVML_ERROR_RESET_REQUIRED): a whole
  // GPU's status, like kGpuLost.
  kResetRequired,
};

std::string_view ValueStatusName(ValueStatus status);

struct FieldValue {
  ValueStatus status = ValueStatus::kNoData;
  bool injected = false;  // came from fault injection, not from the GPU
  std::variant<int64_t, double, std::string> value;

  static FieldValue Int(int64_t v) { return {ValueStatus::kOk, false, v}; }
  static FieldValue Double(double v) { return {ValueStatus::kOk, false, v}; }
  static FieldValue String(std::string v) { return {ValueStatus::kOk, false, std::move(v)}; }
  static FieldValue Error(ValueStatus status) { return {status, false, int64_t{0}}; }

  bool ok() const { return status == ValueStatus::kOk; }
  // Preconditions: ok() and the value holds the asked type.
  int64_t as_int() const { return std::get<int64_t>(value); }
  double as_double() const { return std::get<double>(value); }
  const std::string& as_string() const { return std::get<std::string>(value); }
  // The value as a number whatever its numeric type; 0 for strings and errors.
  double numeric() const;

  friend bool operator==(const FieldValue&, const FieldValue&) = default;
};

}  // namespace vigil
