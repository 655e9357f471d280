// Tests gzip compression (inflated back with zlib) and the Accept-Encoding check.
#include "common/gzip.h"

#include <zlib.h>

#include "gtest/gtest.h"

namespace vigil {
namespace {

// Inflates every gzip member of `data`, one after the other.
std::string Gunzip(const std::string& data) {
  z_stream stream{};
  EXPECT_EQ(inflateInit2(&stream, 15 + 16), Z_OK);
  std::string out;
  char buffer[4096];
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  int code = Z_OK;
  while (code != Z_STREAM_END) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    code = inflate(&stream, Z_NO_FLUSH);
    EXPECT_TRUE(code == Z_OK || code == Z_STREAM_END) << code;
    if (code != Z_OK && code != Z_STREAM_END) break;
    out.append(buffer, sizeof(buffer) - stream.avail_out);
  }
  inflateEnd(&stream);
  return out;
}

TEST(GzipTest, CompressesWhatInflatesBack) {
  std::string text;
  for (int i = 0; i < 5000; ++i)
    text += "DCGM_FI_DEV_GPU_TEMP{gpu=\"" + std::to_string(i % 8) + "\"} 41\n";
  const std::string compressed = Gzip(text, 1);
  EXPECT_LT(compressed.size(), text.size() / 5);
  ASSERT_GE(compressed.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(compressed[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>(compressed[1]), 0x8b);
  EXPECT_EQ(Gunzip(compressed), text);
  EXPECT_EQ(Gunzip(Gzip("")), "");
}

TEST(GzipTest, AcceptEncodingAsRfc9110) {
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("deflate, gzip;q=0.5"));  // Prometheus sends "gzip"
  EXPECT_TRUE(AcceptsGzip(" GZIP "));
  EXPECT_TRUE(AcceptsGzip("x-gzip"));
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_FALSE(AcceptsGzip("identity"));
  EXPECT_FALSE(AcceptsGzip("br, deflate"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("gzip; q=0.000"));
  EXPECT_TRUE(AcceptsGzip("gzip;q=0.1"));
}

}  // namespace
}  // namespace vigil
