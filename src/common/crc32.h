// CRC-32 (IEEE 802.3, as zlib's crc32) for checking records on disk. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace vigil {

uint32_t Crc32(std::string_view data);

}  // namespace vigil
