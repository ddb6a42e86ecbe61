#include "core/codec/stamps.h"

#include <fmt/format.h>

#include <ctime>

#include "core/names.h"
#include "core/strings.h"

namespace hami::codec {
namespace {

constexpr std::string_view kRequesting = "Requesting";

bool TwoDigits(std::string_view s, std::size_t at, int& out) {
  if (at + 2 > s.size() || s[at] < '0' || s[at] > '9' || s[at + 1] < '0' || s[at + 1] > '9') return false;
  out = (s[at] - '0') * 10 + (s[at + 1] - '0');
  return true;
}

bool FourDigits(std::string_view s, std::size_t at, int& out) {
  int hi = 0, lo = 0;
  if (!TwoDigits(s, at, hi) || !TwoDigits(s, at + 2, lo)) return false;
  out = hi * 100 + lo;
  return true;
}

// Parses "YYYY-MM-DD?HH:MM:SS" (separator at position 10 is `sep`) into a tm; returns chars consumed.
constexpr int kMinYear = 1970;
constexpr int kMaxYear = 2200;

bool ParseDateTime(std::string_view s, char sep, std::tm& tm) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  if (s.size() < 19 || !FourDigits(s, 0, y) || s[4] != '-' || !TwoDigits(s, 5, mo) || s[7] != '-' ||
      !TwoDigits(s, 8, d) || (s[10] != sep && !(sep == 'T' && s[10] == 't')) || !TwoDigits(s, 11, h) ||
      s[13] != ':' || !TwoDigits(s, 14, mi) || s[16] != ':' || !TwoDigits(s, 17, se)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return false;
  // TimePoint counts nanoseconds in 64 bits (1677-2262): keep every stamp, and every difference of two
  // stamps, inside that range.
  if (y < kMinYear || y > kMaxYear) return false;
  tm = std::tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  return true;
}

}  // namespace

Handshake ParseHandshake(std::string_view value, bool present) {
  Handshake h;
  if (!present) return h;
  if (value.find(kRequesting) == std::string_view::npos) {
    h.kind = Handshake::Kind::kReported;
    return h;
  }
  const auto underscore = value.find('_');
  std::tm tm{};
  if (underscore == std::string_view::npos || value.size() - underscore - 1 != 19 ||
      !ParseDateTime(value.substr(underscore + 1), ' ', tm)) {
    h.kind = Handshake::Kind::kMalformedRequest;
    return h;
  }
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);  // local time zone, as the writer used
  if (t == static_cast<std::time_t>(-1)) {
    h.kind = Handshake::Kind::kMalformedRequest;
    return h;
  }
  h.kind = Handshake::Kind::kRequesting;
  h.requested_at = std::chrono::system_clock::from_time_t(t);
  return h;
}

std::string FormatHandshakeRequest(TimePoint now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  return fmt::format("Requesting_{:04}-{:02}-{:02} {:02}:{:02}:{:02}", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

Result<TimePoint> ParseRfc3339(std::string_view text) {
  std::tm tm{};
  if (!ParseDateTime(text, 'T', tm)) {
    return Error{
        fmt::format("time '{}' is not an RFC 3339 time between the years {} and {} (want e.g. "
                    "2026-08-21T06:20:39Z)",
                    text, kMinYear, kMaxYear)};
  }
  std::string_view rest = text.substr(19);
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    std::size_t n = 0;
    while (n < rest.size() && rest[n] >= '0' && rest[n] <= '9') ++n;
    if (n == 0) return Error{fmt::format("time '{}': empty fractional seconds", text)};
    rest.remove_prefix(n);  // sub-second precision is not needed for lock ages
  }
  long offset_seconds = 0;
  if (rest == "Z" || rest == "z") {
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    int oh = 0, om = 0;
    if (!TwoDigits(rest, 1, oh) || !TwoDigits(rest, 4, om)) {
      return Error{fmt::format("time '{}': bad zone offset '{}'", text, rest)};
    }
    offset_seconds = (oh * 3600L + om * 60L) * (rest[0] == '-' ? -1 : 1);
  } else {
    return Error{fmt::format("time '{}': want a zone suffix Z or +HH:MM, got '{}'", text, rest)};
  }
  const std::time_t utc = timegm(&tm) - offset_seconds;
  return std::chrono::system_clock::from_time_t(utc);
}

std::string FormatRfc3339(TimePoint t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string FormatRfc3339Micro(TimePoint t) {
  const auto since_epoch = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
  const auto micros = (since_epoch.count() % 1000000 + 1000000) % 1000000;
  const std::string seconds = FormatRfc3339(t - std::chrono::microseconds(micros));
  return fmt::format("{}.{:06}Z", seconds.substr(0, seconds.size() - 1), micros);
}

Result<NodeLock> ParseNodeLock(std::string_view value) {
  NodeLock lock;
  if (value.find(',') == std::string_view::npos) {
    auto t = ParseRfc3339(value);
    if (!t) return Error{fmt::format("node lock '{}': {}", value, t.error().message)};
    lock.taken_at = *t;
    lock.legacy = true;
    return lock;
  }
  const auto parts = Split(value, ',');
  if (parts.size() != 3) {
    return Error{
        fmt::format("node lock '{}': want <RFC3339 time>,<namespace>,<pod>, got {} comma-separated parts",
                    value, parts.size())};
  }
  auto t = ParseRfc3339(parts[0]);
  if (!t) return Error{fmt::format("node lock '{}': {}", value, t.error().message)};
  lock.taken_at = *t;
  // Looked up on the API server: a value that is no namespace/pod name is no owner (docs/DECISIONS.md, D8).
  if (!IsDns1123Label(parts[1]) || !IsDns1123Subdomain(parts[2])) {
    return Error{fmt::format("node lock '{}': owner '{},{}' is not a namespace and a pod name", value,
                             parts[1], parts[2])};
  }
  lock.ns = std::string(parts[1]);
  lock.pod = std::string(parts[2]);
  return lock;
}

std::string FormatNodeLock(TimePoint now, std::string_view ns, std::string_view pod) {
  return fmt::format("{},{},{}", FormatRfc3339(now), ns, pod);
}

}  // namespace hami::codec
