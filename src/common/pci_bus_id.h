// PCI bus ids in the one form sysfs, DRA and Vigil's NIC map compare them in. Pure functions;
// thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace vigil {

// A PCI bus id as sysfs and DRA write it: a 4-digit domain, lower case ("0000:3b:00.0"), from
// NVML's ("00000000:3B:00.0") or any other width of domain; "" when `id` is not BUS:DEVICE.FN.
std::string NormalizePciBusId(std::string_view id);

}  // namespace vigil
