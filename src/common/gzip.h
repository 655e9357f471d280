// gzip (RFC 1952, through zlib): compression of a rendered body, for HTTP answers with
// `Content-Encoding: gzip`, and of flight recordings; decompression of the latter, checked.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace vigil {

// `data` as one gzip member at zlib `level` (1 fastest … 9 smallest). Crashes only on a broken
// invariant of zlib's (it cannot fail on memory it was given).
std::string Gzip(std::string_view data, int level = 6);
// The data of one gzip member, its CRC-32 and length checked (zlib checks the trailer).
// DataLoss for anything that is not a whole, intact gzip member; ResourceExhausted past
// `max_size` bytes of output.
absl::StatusOr<std::string> Gunzip(std::string_view data, size_t max_size);

// Whether an Accept-Encoding header value accepts gzip: a `gzip` (or `x-gzip`) coding whose
// q-value is not 0, as RFC 9110 §12.5.3 has it.
bool AcceptsGzip(std::string_view accept_encoding);

}  // namespace vigil
