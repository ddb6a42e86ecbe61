#include "k8s/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace hami::k8s::prom {
namespace {

TEST(PromTextWriter, WritesFamiliesInExpositionFormat) {
  TextWriter w;
  w.Family("hami_build_info", "Build information.", "gauge");
  w.Sample("hami_build_info", {{"version", "v1.2.3"}, {"compiler", "gcc"}}, 1);
  w.Family("hami_filter_requests_total", "Filter calls by result.", "counter");
  w.Sample("hami_filter_requests_total", {{"result", "scheduled"}}, 3);
  w.Sample("hami_filter_requests_total", {{"result", "error"}}, 0);
  w.Family("hami_gpu_memory_limit_bytes", "", "gauge");  // no help: no HELP line
  w.Sample("hami_gpu_memory_limit_bytes", {}, 17179869184.0);
  EXPECT_EQ(w.Take(),
            "# HELP hami_build_info Build information.\n"
            "# TYPE hami_build_info gauge\n"
            "hami_build_info{version=\"v1.2.3\",compiler=\"gcc\"} 1\n"
            "# HELP hami_filter_requests_total Filter calls by result.\n"
            "# TYPE hami_filter_requests_total counter\n"
            "hami_filter_requests_total{result=\"scheduled\"} 3\n"
            "hami_filter_requests_total{result=\"error\"} 0\n"
            "# TYPE hami_gpu_memory_limit_bytes gauge\n"
            "hami_gpu_memory_limit_bytes 17179869184\n");
  EXPECT_EQ(w.Take(), "");
  // Take() starts over: the same family may be written again on the next scrape.
  w.Family("hami_build_info", "Build information.", "gauge");
  w.Sample("hami_build_info", {}, 1);
  EXPECT_EQ(w.Take(),
            "# HELP hami_build_info Build information.\n# TYPE hami_build_info gauge\nhami_build_info 1\n");
}

TEST(PromTextWriter, EscapesHelpAndLabelValues) {
  TextWriter w;
  w.Family("m", "a \\ backslash\nand a \"quote\"", "untyped");
  w.Sample("m", {{"path", "C:\\dir"}, {"msg", "say \"hi\"\nbye"}}, 2);
  EXPECT_EQ(w.Take(),
            "# HELP m a \\\\ backslash\\nand a \"quote\"\n"
            "# TYPE m untyped\n"
            "m{path=\"C:\\\\dir\",msg=\"say \\\"hi\\\"\\nbye\"} 2\n");
}

TEST(PromTextWriter, MisuseNeverProducesInvalidExposition) {
  TextWriter w;
  w.Family("a", "first", "gauge");
  w.Sample("a", {}, 1);
  w.Family("b", "second", "gauge");
  // Debug builds assert; release builds drop the call. Either way the output stays valid.
  EXPECT_DEBUG_DEATH(w.Sample("a", {}, 2), "");                    // a's group is closed
  EXPECT_DEBUG_DEATH(w.Family("a", "again", "gauge"), "");         // a family twice
  EXPECT_DEBUG_DEATH(w.Family("c", "x", "histogramm"), "");        // unknown type
  EXPECT_DEBUG_DEATH(w.Family("0bad", "x", "gauge"), "");          // invalid name
  EXPECT_DEBUG_DEATH(w.Sample("b_bucket", {}, 1), "");             // gauges have no buckets
  EXPECT_DEBUG_DEATH(w.Sample("b", {{"bad-label", "v"}}, 1), "");  // invalid label name
  w.Sample("b", {}, 5);
  EXPECT_EQ(w.Take(),
            "# HELP a first\n# TYPE a gauge\na 1\n"
            "# HELP b second\n# TYPE b gauge\nb 5\n");
}

TEST(PromFormatValue, IntegersPlainOtherwiseLikeGo) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(1048576), "1048576");
  EXPECT_EQ(FormatValue(25769803776.0), "25769803776");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.0001), "0.0001");
  EXPECT_EQ(FormatValue(0.000015), "1.5e-05");
  EXPECT_EQ(FormatValue(123456.5), "123456.5");
  EXPECT_EQ(FormatValue(2500000.5), "2.5000005e+06");
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(PromHistogram, WritesCumulativeBucketsSumAndCount) {
  Histogram h({1, 0.5, 2, 2});  // unsorted, with a duplicate
  EXPECT_EQ(h.upper_bounds(), (std::vector<double>{0.5, 1, 2}));
  for (double v : {0.25, 0.5, 0.75, 3.0}) h.Observe(v);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 4.5);
  TextWriter w;
  w.Family("hami_extender_request_duration_seconds", "Extender call latency.", "histogram");
  h.Write(w, "hami_extender_request_duration_seconds", {{"verb", "filter"}});
  EXPECT_EQ(w.Take(),
            "# HELP hami_extender_request_duration_seconds Extender call latency.\n"
            "# TYPE hami_extender_request_duration_seconds histogram\n"
            "hami_extender_request_duration_seconds_bucket{verb=\"filter\",le=\"0.5\"} 2\n"
            "hami_extender_request_duration_seconds_bucket{verb=\"filter\",le=\"1\"} 3\n"
            "hami_extender_request_duration_seconds_bucket{verb=\"filter\",le=\"2\"} 3\n"
            "hami_extender_request_duration_seconds_bucket{verb=\"filter\",le=\"+Inf\"} 4\n"
            "hami_extender_request_duration_seconds_sum{verb=\"filter\"} 4.5\n"
            "hami_extender_request_duration_seconds_count{verb=\"filter\"} 4\n");
}

TEST(PromHistogram, EmptyHistogramStillHasInfBucket) {
  const Histogram h({0.001});
  TextWriter w;
  w.Family("x", "", "histogram");
  h.Write(w, "x", {});
  EXPECT_EQ(w.Take(),
            "# TYPE x histogram\n"
            "x_bucket{le=\"0.001\"} 0\n"
            "x_bucket{le=\"+Inf\"} 0\n"
            "x_sum 0\n"
            "x_count 0\n");
}

TEST(PromHistogram, QuantileInterpolatesInsideBuckets) {
  Histogram h({1, 2, 3, 4});
  EXPECT_TRUE(std::isnan(h.Quantile(0.5)));  // empty
  for (double v : {0.5, 1.5, 2.5, 3.5}) h.Observe(v);
  EXPECT_DOUBLE_EQ(h.Quantile(0.5), 2.0);    // rank 2: the end of bucket (1,2]
  EXPECT_DOUBLE_EQ(h.Quantile(0.25), 1.0);   // rank 1: the end of bucket (0,1]
  EXPECT_DOUBLE_EQ(h.Quantile(0.125), 0.5);  // half-way into (0,1]
  EXPECT_DOUBLE_EQ(h.Quantile(0.875), 3.5);  // half-way into (3,4]
  EXPECT_DOUBLE_EQ(h.Quantile(0), 0.0);      // the lower edge of the first non-empty bucket
  EXPECT_EQ(h.Quantile(-0.1), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(h.Quantile(1.5), std::numeric_limits<double>::infinity());
  h.Observe(100);                        // beyond the last bound
  EXPECT_DOUBLE_EQ(h.Quantile(1), 4.0);  // +Inf bucket: the highest finite bound
}

TEST(PromHistogram, NaNObservationsCountInInfBucket) {
  Histogram h({1});
  h.Observe(std::numeric_limits<double>::quiet_NaN());
  TextWriter w;
  w.Family("n", "", "histogram");
  h.Write(w, "n", {});
  EXPECT_EQ(w.Take(),
            "# TYPE n histogram\nn_bucket{le=\"1\"} 0\nn_bucket{le=\"+Inf\"} 1\nn_sum NaN\nn_count 1\n");
}

TEST(PromHistogram, LatencyBucketsSuitMillisecondCalls) {
  const std::vector<double> b = Histogram::LatencyBuckets();
  ASSERT_GE(b.size(), 14u);
  ASSERT_LE(b.size(), 18u);
  EXPECT_DOUBLE_EQ(b.front(), 0.0001);
  EXPECT_DOUBLE_EQ(b.back(), 30);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  // At least five bounds between 1 ms and 100 ms, where extender calls land.
  EXPECT_GE(std::count_if(b.begin(), b.end(), [](double x) { return x >= 0.001 && x <= 0.1; }), 5);
  EXPECT_EQ(Histogram().upper_bounds(), b);
  // The bounds print as Prometheus users expect to read them.
  TextWriter w;
  w.Family("l", "", "histogram");
  Histogram().Write(w, "l", {});
  const std::string text = w.Take();
  EXPECT_NE(text.find("l_bucket{le=\"0.0001\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("l_bucket{le=\"0.00025\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("l_bucket{le=\"2.5\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("l_bucket{le=\"30\"} 0\n"), std::string::npos);
}

}  // namespace
}  // namespace hami::k8s::prom
