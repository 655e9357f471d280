// Tests of the incident report's page: the failing system's charts first, charts only for data,
// text escaped (a recording's words never become markup), the fault marked, nothing to fetch.
#include "report/report.h"

#include "fields/catalogue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Recording WithSeries(std::vector<FieldId> fields) {
  Recording r{.id = "rec-1",
              .node_name = "node-<a>",
              .gpu = 3,
              .uuid = "GPU-3",
              .trigger_time_us = 1'000'000'000,
              .window_start_us = 0,
              .window_end_us = 2'000'000'000};
  for (FieldId field : fields) {
    RecordingSeries& s = r.series.emplace_back();
    s.field = field;
    s.name = std::string(FindField(field)->name);
    s.type = FindField(field)->type;
    for (int i = 0; i < 20; ++i) {
      const int64_t t = i * 100'000'000;
      s.samples.push_back(
          {static_cast<uint64_t>(i), t,
           s.type == FieldType::kDouble ? FieldValue::Double(300 + i) : FieldValue::Int(i)});
    }
  }
  return r;
}

TEST(ReportTest, TheFailingSystemsEvidenceComesFirstAndOnlyChartsWithData) {
  Recording r =
      WithSeries({fid::kPowerUsage, fid::kGpuTemp, fid::kEccDbeVolTotal, fid::kPcieReplayCounter});
  r.incidents.push_back(
      {.system = "memory", .status = "FAIL", .code = "DCGM_FR_VOLATILE_DBE_DETECTED"});
  const std::vector<ReportChart> charts = ChartsFor(r);
  ASSERT_GE(charts.size(), 3u);
  EXPECT_EQ(charts[0].title, "ECC errors");
  std::vector<std::string> titles;
  for (const ReportChart& chart : charts) titles.push_back(chart.title);
  EXPECT_THAT(titles, ::testing::Contains("Power and its limits"));
  EXPECT_THAT(titles, Not(::testing::Contains("PCIe replays")))
      << "not evidence for a failing system";
  EXPECT_THAT(titles, Not(::testing::Contains("NVLink errors"))) << "no data";
}

TEST(ReportTest, ThePageEscapesTextMarksTheFaultAndFetchesNothing) {
  Recording r = WithSeries({fid::kPowerUsage});
  r.trigger_summary = "<script>alert(1)</script> & more";
  // A gap: a lost GPU's samples break the line rather than drawing to zero.
  r.series[0].samples[10].value = FieldValue::Error(ValueStatus::kGpuLost);
  const std::string html = RenderReportHtml(r);
  EXPECT_THAT(html, Not(HasSubstr("<script>")));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"));
  EXPECT_THAT(html, HasSubstr("node-&lt;a&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("http")));  // nothing from the network
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, HasSubstr("class=\"fault\""));
  // Two pen-downs: before and after the gap.
  const size_t path = html.find("<path class=\"series\"");
  ASSERT_NE(path, std::string::npos);
  const std::string d = html.substr(path, html.find("/>", path) - path);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2);
  const nlohmann::json json = ReportJson(r);
  EXPECT_EQ(json["charts"][0]["series"][0]["samples"][10]["value"], nullptr);
}

// A series that stays at a value past 2^53 (a counter read as a large constant): the chart still
// has a height, every coordinate is a number.
TEST(ReportTest, AConstantSeriesPastTwoToThe53IsChartedWithNumbers) {
  for (const int64_t value :
       {int64_t{0}, int64_t{1} << 53, int64_t{1} << 60, -(int64_t{1} << 60)}) {
    Recording r = WithSeries({fid::kPowerUsage});
    for (RecordingSample& sample : r.series[0].samples) {
      sample.value = FieldValue::Double(static_cast<double>(value));
    }
    const std::string html = RenderReportHtml(r);
    const size_t path = html.find("<path class=\"series\"");
    ASSERT_NE(path, std::string::npos) << value;
    const std::string d = html.substr(path, html.find("/>", path) - path);
    EXPECT_THAT(d, Not(HasSubstr("nan"))) << value;
    EXPECT_THAT(d, Not(HasSubstr("inf"))) << value;
  }
}

}  // namespace
}  // namespace vigil
