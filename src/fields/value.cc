// Names and numeric views of FieldValue.
#include "fields/value.h"

namespace vigil {

std::string_view ValueStatusName(ValueStatus status) {
  switch (status) {
    case ValueStatus::kOk:
      return "ok";
    case ValueStatus::kNotSupported:
      return "not_supported";
    case ValueStatus::kGpuLost:
      return "gpu_lost";
    case ValueStatus::kReadError:
      return "read_error";
    case ValueStatus::kNoPermission:
      return "no_permission";
    case ValueStatus::kTimeout:
      return "timeout";
    case ValueStatus::kResetRequired:
      return "reset_required";
    case ValueStatus::kNoData:
      return "no_data";
  }
  return "invalid";
}

double FieldValue::numeric() const {
  if (!ok()) return 0;
  if (const auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value)) return *d;
  return 0;
}

}  // namespace vigil
