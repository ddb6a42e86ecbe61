#include "k8s/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <limits>

namespace hami::k8s::prom {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool ValidMetricName(std::string_view name) {
  if (name.empty() || IsDigit(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsAsciiLetter(c) || IsDigit(c) || c == '_' || c == ':'; });
}

// [a-zA-Z_][a-zA-Z0-9_]*
bool ValidLabelName(std::string_view name) {
  if (name.empty() || IsDigit(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsAsciiLetter(c) || IsDigit(c) || c == '_'; });
}

bool KnownType(std::string_view type) {
  return type == "counter" || type == "gauge" || type == "histogram" || type == "summary" ||
         type == "untyped";
}

// HELP text escapes backslash and newline; label values also escape the double quote.
void AppendEscaped(std::string& out, std::string_view text, bool quote) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

}  // namespace

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integers exactly as written (Go would say 1.048576e+06): byte counts stay readable.
  if (value == std::trunc(value) && std::fabs(value) < 1e15) return fmt::format("{:.0f}", value);
  char buf[64];
  const auto sci = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  const std::string_view scientific(buf, static_cast<std::size_t>(sci.ptr - buf));
  int exponent = 0;
  const auto e = scientific.find('e');
  std::from_chars(scientific.data() + e + (scientific[e + 1] == '+' ? 2 : 1),
                  scientific.data() + scientific.size(), exponent);
  // Go's 'g' with the shortest precision: scientific below 1e-4 and from 1e6 up.
  if (exponent < -4 || exponent >= 6) return std::string(scientific);
  const auto fixed = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed);
  return std::string(buf, fixed.ptr);
}

void TextWriter::Family(std::string_view name, std::string_view help, std::string_view type) {
  const bool valid = ValidMetricName(name) && KnownType(type) && !families_.contains(name);
  assert(valid && "prometheus family: invalid name or type, or written twice");
  if (!valid) return;  // its samples do not belong to the open family: they are dropped too
  families_.emplace(name);
  open_name_ = name;
  open_type_ = type;
  if (!help.empty()) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    AppendEscaped(out_, help, /*quote=*/false);
    out_ += '\n';
  }
  out_ += fmt::format("# TYPE {} {}\n", name, type);
}

bool TextWriter::SampleBelongsToOpenFamily(std::string_view name) const {
  if (open_name_.empty() || !name.starts_with(open_name_)) return false;
  const std::string_view suffix = name.substr(open_name_.size());
  if (suffix.empty()) return true;
  if (open_type_ == "histogram" && suffix == "_bucket") return true;
  return (open_type_ == "histogram" || open_type_ == "summary") && (suffix == "_sum" || suffix == "_count");
}

void TextWriter::Sample(std::string_view name, const Labels& labels, double value) {
  const bool valid =
      SampleBelongsToOpenFamily(name) &&
      std::all_of(labels.begin(), labels.end(), [](const auto& l) { return ValidLabelName(l.first); });
  assert(valid && "prometheus sample: not of the open family, or an invalid label name");
  if (!valid) return;
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      AppendEscaped(out_, labels[i].second, /*quote=*/true);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

std::string TextWriter::Take() {
  std::string text = std::move(out_);
  out_.clear();
  families_.clear();
  open_name_.clear();
  open_type_.clear();
  return text;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::erase_if(bounds_,
                [](double b) { return std::isnan(b) || b == std::numeric_limits<double>::infinity(); });
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  buckets_.assign(bounds_.size() + 1, 0);
}

Histogram::Histogram() : Histogram(LatencyBuckets()) {}

std::vector<double> Histogram::LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
}

void Histogram::Observe(double value) {
  // le is "less than or equal": the first bound >= value; NaN counts in +Inf, as Prometheus clients do.
  const std::size_t bucket =
      std::isnan(value) ? bounds_.size()
                        : static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                                   bounds_.begin());
  ++buckets_[bucket];
  ++count_;
  sum_ += value;
}

double Histogram::Quantile(double q) const {
  if (std::isnan(q) || count_ == 0) return std::numeric_limits<double>::quiet_NaN();
  if (q < 0) return -std::numeric_limits<double>::infinity();
  if (q > 1) return std::numeric_limits<double>::infinity();
  const double rank = q * static_cast<double>(count_);
  std::uint64_t below = 0;  // observations in the buckets before this one
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    const std::uint64_t here = buckets_[i];
    if (here > 0 && static_cast<double>(below + here) >= rank) {
      if (i == 0 && bounds_[0] <= 0) return bounds_[0];  // no known lower edge
      const double lower = i == 0 ? 0.0 : bounds_[i - 1];
      return lower + (bounds_[i] - lower) * (rank - static_cast<double>(below)) / static_cast<double>(here);
    }
    below += here;
  }
  // The rank is in the +Inf bucket: the highest finite bound is the best estimate there is.
  return bounds_.empty() ? std::numeric_limits<double>::quiet_NaN() : bounds_.back();
}

void Histogram::Write(TextWriter& out, std::string_view name, const Labels& labels) const {
  const std::string base(name);
  const std::string bucket_name = base + "_bucket";
  Labels with_le = labels;
  with_le.emplace_back("le", "");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i];
    with_le.back().second = FormatValue(bounds_[i]);
    out.Sample(bucket_name, with_le, static_cast<double>(cumulative));
  }
  with_le.back().second = "+Inf";
  out.Sample(bucket_name, with_le, static_cast<double>(count_));
  out.Sample(base + "_sum", labels, sum_);
  out.Sample(base + "_count", labels, static_cast<double>(count_));
}

}  // namespace hami::k8s::prom
