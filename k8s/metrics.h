#pragma once
// Prometheus text exposition format 0.0.4: a writer that keeps the output valid (one contiguous group per
// family, HELP and TYPE before the samples, escaped text) and a fixed-bucket histogram. No global registry:
// whoever serves /metrics writes its families on each scrape.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hami::k8s::prom {

inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

using Labels = std::vector<std::pair<std::string, std::string>>;

// A sample value as Prometheus reads it: NaN, +Inf, -Inf; integers without exponent or decimals
// (1048576); anything else like Go's strconv.FormatFloat(v, 'g', -1, 64) (0.25, 1.5e-05, 2.5e+06).
std::string FormatValue(double value);

// Whatever writes a /metrics page of its own families (the HTTP adapter serves it).
class Source {
 public:
  virtual ~Source() = default;
  virtual std::string Metrics() const = 0;
};

class TextWriter {
 public:
  // Starts a family: "# HELP name help" and "# TYPE name type" (type: counter|gauge|histogram|summary|
  // untyped). A family written twice, an invalid name or an unknown type is a programming error: it asserts
  // in debug builds and is ignored in release builds, together with its samples.
  void Family(std::string_view name, std::string_view help, std::string_view type);
  // One sample of the open family. `name` is the family's name, or for histograms and summaries the family's
  // name plus _bucket, _sum or _count. A sample of another family (or with an invalid label name) asserts in
  // debug builds and is dropped in release builds.
  void Sample(std::string_view name, const Labels& labels, double value);
  // A family of one unlabelled sample: a counter or a gauge.
  void Counter(std::string_view name, std::string_view help, double value) {
    Single(name, help, "counter", value);
  }
  void Gauge(std::string_view name, std::string_view help, double value) {
    Single(name, help, "gauge", value);
  }
  // The text so far (ends with '\n' when not empty); the writer starts over, empty.
  std::string Take();

 private:
  bool SampleBelongsToOpenFamily(std::string_view name) const;
  void Single(std::string_view name, std::string_view help, std::string_view type, double value) {
    Family(name, help, type);
    Sample(name, {}, value);
  }

  std::string out_;
  std::set<std::string, std::less<>> families_;
  std::string open_name_;  // "" when no family is open
  std::string open_type_;
};

class Histogram {
 public:
  // Upper bounds in any order (sorted, duplicates, NaN and +Inf dropped); +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  // A histogram with LatencyBuckets().
  Histogram();

  // Seconds, 100 µs .. 30 s: fine steps where extender calls land (milliseconds), coarse ones for stalls.
  static std::vector<double> LatencyBuckets();

  void Observe(double value);
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  const std::vector<double>& upper_bounds() const { return bounds_; }

  // Approximate q-quantile (0 <= q <= 1) from the buckets, interpolating linearly inside the bucket the rank
  // falls in (the lowest bucket starts at 0 when its bound is positive), as PromQL's histogram_quantile
  // does. A rank in the +Inf bucket gives the highest finite bound. NaN when empty or q is NaN; q < 0 gives
  // -Inf and q > 1 gives +Inf.
  double Quantile(double q) const;

  // name_bucket{labels...,le="..."} for every bound in ascending order and le="+Inf" (== count, cumulative),
  // then name_sum and name_count. The family `name` (type histogram) must be the writer's open family.
  void Write(TextWriter& out, std::string_view name, const Labels& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> buckets_;  // per bound, not cumulative; one more for +Inf
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace hami::k8s::prom
