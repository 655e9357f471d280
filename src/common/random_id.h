// Random identifiers, e.g. an engine's instance_id. Thread-safe.
#pragma once

#include <string>

namespace vigil {

// 32 lowercase hex digits (128 bits) from the OS entropy source.
std::string RandomInstanceId();

}  // namespace vigil
