// gzip compression (RFC 1952, through zlib) of a rendered body, for HTTP answers with
// `Content-Encoding: gzip`. A pure function; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace vigil {

// `data` as one gzip member at zlib `level` (1 fastest … 9 smallest). Crashes only on a broken
// invariant of zlib's (it cannot fail on memory it was given).
std::string Gzip(std::string_view data, int level = 6);

// Whether an Accept-Encoding header value accepts gzip: a `gzip` (or `x-gzip`) coding whose
// q-value is not 0, as RFC 9110 §12.5.3 has it.
bool AcceptsGzip(std::string_view accept_encoding);

}  // namespace vigil
