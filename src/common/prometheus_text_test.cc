// Tests of the Prometheus text writer: HELP and TYPE once per family, labels in the order given
// with their values escaped, integers as integers and doubles with the places asked for.
#include "common/prometheus_text.h"

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(PrometheusTextTest, FamiliesSamplesAndEscapedLabels) {
  std::string out;
  PrometheusText text(&out);
  text.Single("a_total", MetricType::kCounter, "Things counted.", uint64_t{18446744073709551615u});
  text.Family("b", MetricType::kGauge, "By label.");
  text.Sample("b", {{"x", "1"}, {"model", "A \"B\"\\C\nD"}}, int64_t{-1});
  text.Single("c_seconds", MetricType::kGauge, "A duration.", 0.25, 3);
  EXPECT_EQ(out,
            "# HELP a_total Things counted.\n# TYPE a_total counter\na_total 18446744073709551615\n"
            "# HELP b By label.\n# TYPE b gauge\nb{x=\"1\",model=\"A \\\"B\\\"\\\\C\\nD\"} -1\n"
            "# HELP c_seconds A duration.\n# TYPE c_seconds gauge\nc_seconds 0.250\n");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace vigil
