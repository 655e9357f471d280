// Implements gzip compression and the Accept-Encoding check (gzip.h).
#include "common/gzip.h"

#include <zlib.h>

#include "common/check.h"
#include "common/strings.h"

namespace vigil {

std::string Gzip(std::string_view data, int level) {
  z_stream stream{};
  // windowBits 15 + 16: a gzip header and trailer around the deflate stream.
  VIGIL_CHECK(deflateInit2(&stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&stream, data.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  VIGIL_CHECK(deflate(&stream, Z_FINISH) == Z_STREAM_END);  // the bound makes one call enough
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

absl::StatusOr<std::string> Gunzip(std::string_view data, size_t max_size) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) return absl::InternalError("zlib: inflateInit2");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buffer[65536];
  int result = Z_OK;
  while (result == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    result = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - stream.avail_out);
    if (out.size() > max_size) {
      inflateEnd(&stream);
      return absl::ResourceExhaustedError("the gzip data decompresses to more than " +
                                          std::to_string(max_size) + " bytes");
    }
    if (result == Z_BUF_ERROR && stream.avail_in == 0) break;  // cut short
  }
  const bool whole = result == Z_STREAM_END && stream.avail_in == 0;
  inflateEnd(&stream);
  if (!whole) {
    return absl::DataLossError(result == Z_STREAM_END ? "data after the gzip member"
                               : result == Z_DATA_ERROR
                                   ? "not gzip data, or corrupted (a bad checksum)"
                                   : "the gzip data is cut short");
  }
  return out;
}

bool AcceptsGzip(std::string_view accept_encoding) {
  for (std::string_view coding : Split(accept_encoding, ',')) {
    const size_t semicolon = coding.find(';');
    const std::string_view name = Trim(coding.substr(0, semicolon));
    if (!EqualsIgnoreCase(name, "gzip") && !EqualsIgnoreCase(name, "x-gzip")) continue;
    if (semicolon == std::string_view::npos) return true;
    // "q=0", "q=0.0", "q=0.000": refused; any other weight accepts.
    std::string_view weight = Trim(coding.substr(semicolon + 1));
    if (!weight.starts_with("q=") && !weight.starts_with("Q=")) return true;
    weight.remove_prefix(2);
    const bool zero = !weight.empty() && weight[0] == '0' &&
                      weight.find_first_not_of("0.", 0) == std::string_view::npos;
    return !zero;
  }
  return false;
}

}  // namespace vigil
