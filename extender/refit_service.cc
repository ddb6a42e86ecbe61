#include "extender/refit_service.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>
#include <unordered_set>

#include "core/base64.h"
#include "core/codec/pod_devices.h"
#include "core/fit.h"
#include "core/keys.h"
#include "core/names.h"
#include "k8s/logging.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;

namespace {

constexpr std::string_view kPodNameExtra = "authentication.kubernetes.io/pod-name";
constexpr std::string_view kPodUidExtra = "authentication.kubernetes.io/pod-uid";
constexpr std::size_t kMaxUuidBytes = 256;
constexpr std::size_t kVerdictsKept = 4096;
constexpr std::size_t kRejectionsKept = 4096;
constexpr std::chrono::seconds kRejectionTtl{10};

// Three non-empty base64url segments separated by '.': what a service-account token is.
bool JwtShaped(std::string_view t) {
  int dots = 0;
  std::size_t run = 0;
  for (char c : t) {
    if (c == '.') {
      if (run == 0) return false;
      ++dots;
      run = 0;
    } else if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
               c == '_') {
      ++run;
    } else {
      return false;
    }
  }
  return dots == 2 && run > 0;
}

// A UUID, a container name or a pod uid: printable, no space, none of the allocation encoding's separators
// (',' ':' ';'), so that nothing read here can change the meaning of an annotation or a log line.
bool PlainToken(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c > ' ' && c < 0x7f && c != ',' && c != ':' && c != ';' && c != '"' && c != '\\';
  });
}

Result<std::string> StringField(const json::object& o, std::string_view key, bool required) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) {
    if (required) return Error{fmt::format("refit request: {} is missing", key)};
    return Ok(std::string());
  }
  if (!v->is_string()) return Error{fmt::format("refit request: {} must be a string", key)};
  return Ok(std::string(v->get_string()));
}

Result<std::vector<std::string>> AllowedField(const json::object& o) {
  const json::value* v = o.if_contains("allowedDeviceUUIDs");
  if (v == nullptr || !v->is_array())
    return Error{std::string("refit request: allowedDeviceUUIDs must be an array of device UUIDs")};
  const json::array& a = v->get_array();
  if (a.empty() || a.size() > kMaxAllowedDevices)
    return Error{fmt::format("refit request: allowedDeviceUUIDs holds {} entries, want 1 to {}", a.size(),
                             kMaxAllowedDevices)};
  std::vector<std::string> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_string() || !PlainToken(a[i].get_string(), kMaxUuidBytes))
      return Error{fmt::format(
          "refit request: allowedDeviceUUIDs[{}] is not a device UUID (want 1 to {} printable characters "
          "without spaces, quotes, ',', ':' or ';')",
          i, kMaxUuidBytes)};
    out.emplace_back(a[i].get_string());
  }
  return out;
}

Result<std::size_t> IndexField(const json::object& o) {
  const json::value* v = o.if_contains("containerIndex");
  if (v == nullptr) return Error{std::string("refit request: containerIndex is missing")};
  if (v->is_int64() && v->get_int64() >= 0 && v->get_int64() < 65536)
    return static_cast<std::size_t>(v->get_int64());
  if (v->is_uint64() && v->get_uint64() < 65536) return static_cast<std::size_t>(v->get_uint64());
  return Error{
      std::string("refit request: containerIndex must be an integer from 0 (init containers first)")};
}

Result<void> CheckNames(const RefitRequest& r) {
  if (auto ok = ValidateName("refit request: podNamespace", r.pod_ns, NameKind::kNamespace); !ok) return ok;
  if (auto ok = ValidateName("refit request: podName", r.pod_name, NameKind::kPod); !ok) return ok;
  if (auto ok = ValidateName("refit request: nodeName", r.node, NameKind::kNode); !ok) return ok;
  if (!PlainToken(r.pod_uid, 128))
    return Error{fmt::format("refit request: podUID {} is not a uid", Quoted(r.pod_uid, 64))};
  if (!r.container_name.empty() && !PlainToken(r.container_name, 253))
    return Error{
        fmt::format("refit request: containerName {} is not a container name", Quoted(r.container_name, 64))};
  if (r.device_type != kRefitDeviceType)
    return Error{fmt::format("refit request: deviceType {} is not supported (only \"{}\")",
                             Quoted(r.device_type, 64), kRefitDeviceType)};
  return {};
}

std::string Sha256Hex(std::string_view s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

// The token's own expiry (its JWT "exp" claim), if it says one: a verdict is never kept past it. Read
// only after the API server vouched for the token.
std::optional<TimePoint> TokenExpiry(std::string_view token) {
  const auto first = token.find('.');
  const auto second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  auto payload = Base64Decode(token.substr(first + 1, second - first - 1));
  if (!payload) return std::nullopt;
  boost::system::error_code ec;
  const json::value claims = json::parse(*payload, ec);
  const json::object* o = ec ? nullptr : claims.if_object();
  const json::value* exp = o ? o->if_contains("exp") : nullptr;
  if (exp == nullptr || !exp->is_number()) return std::nullopt;
  const auto seconds = exp->to_number<double>(ec);
  if (ec) return std::nullopt;
  return TimePoint(std::chrono::seconds(static_cast<std::int64_t>(seconds)));
}

// One extra's single value ("" when absent or not exactly one).
std::string OneExtra(const TokenReviewStatus& s, std::string_view key) {
  auto it = s.extra.find(std::string(key));
  return it == s.extra.end() || it->second.size() != 1 ? std::string() : it->second.front();
}

// One container's entry of an allocation annotation replaced, every other byte kept.
Result<std::string> ReplaceEntry(std::string_view value, std::size_t index, const std::string& entry) {
  std::vector<std::string_view> parts;
  std::size_t from = 0;
  for (;;) {
    const auto semi = value.find(';', from);
    parts.push_back(value.substr(from, semi == std::string_view::npos ? semi : semi - from));
    if (semi == std::string_view::npos) break;
    from = semi + 1;
  }
  if (index >= parts.size() || parts[index].empty())
    return Error{fmt::format("it has no entry for container {}", index)};
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += ';';
    out += i == index ? std::string_view(entry) : parts[i];
  }
  return Ok(std::move(out));
}

// One container's devices in the annotation's per-container form ("uuid,vendor,mem,cores:" per device).
std::string EntryOf(const ContainerDevices& devices) {
  std::string s = codec::EncodePodDevices(PodVendorDevices{devices});
  if (!s.empty() && s.back() == ';') s.pop_back();
  return s;
}

std::string UuidsOf(const ContainerDevices& devices) {
  std::string out;
  for (const auto& d : devices) out += (out.empty() ? "" : ",") + d.uuid;
  return "[" + out + "]";
}

// One container's devices in a pod's allocation annotation `key`, or why there are none.
Result<ContainerDevices> EntryAt(const PodView& pod, const std::string& key, std::size_t index) {
  auto a = pod.annotations.find(key);
  auto decoded = codec::DecodePodDevices(a == pod.annotations.end() ? "" : a->second);
  if (!decoded) return Error{fmt::format("annotation {} cannot be read: {}", key, decoded.error().message)};
  if (index >= decoded->size() || (*decoded)[index].empty())
    return Error{fmt::format("container {} has no {} devices in {}", index, kRefitDeviceType, key)};
  return std::move((*decoded)[index]);
}

}  // namespace

Result<RefitRequest> ParseRefitRequest(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Error{fmt::format("refit request: not JSON: {}", ec.message())};
  if (!v.is_object()) return Error{std::string("refit request: want a JSON object")};
  const json::object& o = v.get_object();
  RefitRequest r;
  struct Field {
    std::string_view key;
    std::string* into;
    bool required;
  };
  for (const Field& f :
       {Field{"podUID", &r.pod_uid, true}, Field{"podNamespace", &r.pod_ns, true},
        Field{"podName", &r.pod_name, true}, Field{"nodeName", &r.node, true},
        Field{"containerName", &r.container_name, false}, Field{"deviceType", &r.device_type, true}}) {
    auto s = StringField(o, f.key, f.required);
    if (!s) return s.error();
    *f.into = std::move(*s);
  }
  auto index = IndexField(o);
  if (!index) return index.error();
  r.container_index = *index;
  auto allowed = AllowedField(o);
  if (!allowed) return allowed.error();
  r.allowed = std::move(*allowed);
  if (auto ok = CheckNames(r); !ok) return ok.error();
  return r;
}

std::string RefitAnswerJson(const RefitAnswer& a) {
  json::object o{{"succeeded", a.succeeded}};
  if (!a.container_devices.empty()) o["containerDevices"] = a.container_devices;
  if (!a.failure_reason.empty()) o["failureReason"] = a.failure_reason;
  return json::serialize(o);
}

RefitService::RefitService(LedgerFeed& feed, const PodLedger& ledger,
                           const std::map<std::string, PodView>& pods, LockQueue& queue, NodeLocker& locker,
                           ClusterWriter& writer, const Clock& clock, RefitOptions options,
                           SchedulerOptions policies)
    : feed_(&feed),
      ledger_(&ledger),
      pods_(&pods),
      queue_(&queue),
      locker_(&locker),
      writer_(&writer),
      clock_(&clock),
      options_(std::move(options)),
      policies_(std::move(policies)),
      latency_(k8s::prom::Histogram::LatencyBuckets()) {}

void RefitService::Count(const RefitAnswer& a, double seconds) {
  const char* result = a.status == 200   ? (a.succeeded ? (a.moved ? "moved" : "unchanged") : "refused")
                       : a.status == 401 ? "unauthenticated"
                       : a.status == 403 ? "forbidden"
                       : a.status == 503 || a.status == 429 ? "unavailable"
                                                            : "invalid";
  ++results_[result];
  latency_.Observe(seconds);
}

RefitAnswer RefitService::Refuse(unsigned status, std::string reason) {
  RefitAnswer a = Refused(nullptr, status, std::move(reason));
  Count(a, 0);
  return a;
}

RefitAnswer RefitService::Refused(const PodView* pod, unsigned status, std::string reason) {
  // Escaped once, here, for the answer, the log line and the event alike: reasons carry annotation text.
  reason = k8s::EscapeControlChars(reason);
  spdlog::info("refit refused ({}): {}", status, reason);
  if (pod != nullptr) writer_->Event(k8s::InvolvedObject::Of(*pod), "Warning", "NumaRefitFailed", reason);
  RefitAnswer a;
  a.status = status;
  a.failure_reason = std::move(reason);
  return a;
}

asio::awaitable<RefitAnswer> RefitService::Refit(const RefitRequest& request,
                                                 std::string_view authorization) {
  const auto started = steady_clock::now();
  RefitAnswer a = co_await Decide(request, authorization, clock_->Now());
  Count(a, std::chrono::duration<double>(steady_clock::now() - started).count());
  co_return a;
}

asio::awaitable<RefitAnswer> RefitService::Decide(const RefitRequest& request, std::string_view authorization,
                                                  TimePoint start) {
  // Who asks comes first: nothing of the pod named is looked at for a caller that is not let in.
  if (auto refused = co_await Authenticate(request, authorization)) co_return std::move(*refused);
  // One refit of a pod at a time: a second one would count the node lock as its own (re-entered) and work
  // on the same copy of the pod as the first.
  if (!refitting_.insert(request.pod_uid).second)
    co_return Refused(nullptr, 200, "a refit of this pod is already running");
  struct Running {
    std::unordered_set<std::string>* set;
    std::string uid;
    ~Running() { set->erase(uid); }
  } running{&refitting_, request.pod_uid};
  co_return co_await Locked(request, start);
}

std::optional<RefitAnswer> RefitService::Unchanged(const RefitRequest& request, const Target& target) {
  std::unordered_set<std::string_view> allowed(request.allowed.begin(), request.allowed.end());
  if (!std::all_of(target.current.begin(), target.current.end(),
                   [&](const ContainerDevice& d) { return allowed.contains(d.uuid); }))
    return std::nullopt;
  RefitAnswer a;
  a.succeeded = true;
  a.container_devices = EntryOf(target.current);
  return a;
}

RefitAnswer RefitService::NotLocated(const RefitRequest& request, std::string reason) {
  auto it = pods_->find(request.pod_ns + "/" + request.pod_name);
  // An event only on a pod of the request's node: the caller is that node's device plugin, no other's.
  const bool ours =
      it != pods_->end() && it->second.uid == request.pod_uid && it->second.node_name == request.node;
  return Refused(ours ? &it->second : nullptr, 200, std::move(reason));
}

asio::awaitable<RefitAnswer> RefitService::Locked(const RefitRequest& request, TimePoint start) {
  auto target = Locate(request);
  if (!target) co_return NotLocated(request, std::move(target.error().message));
  if (auto same = Unchanged(request, *target)) co_return std::move(*same);
  // The node's allocation lock, as the bind takes it: the pod being set up holds it already (taken again
  // without a write); otherwise it is taken for the refit and given back after it.
  std::optional<std::pair<LockTarget, LockOutcome>> taken;
  const BackendSpec& spec = target->backend->Spec();
  if (!spec.keys.node_lock.empty()) {
    LockTarget lock{request.node, spec.keys.node_lock, spec.lock, target->pod.ns, target->pod.name};
    const auto left = start + options_.budget - options_.patch_reserve - clock_->Now();
    const auto deadline = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(left);
    LockOutcome got = co_await queue_->Acquire(lock, deadline);
    if (!got.acquired)
      co_return Refused(&target->pod, 200, fmt::format("node {} is locked: {}", request.node, got.message));
    if (!got.reentered) taken.emplace(std::move(lock), std::move(got));
  }
  // Given back on every way out: after an exception, by a coroutine of its own.
  struct Giveback {
    NodeLocker* locker;
    asio::any_io_executor executor;
    std::optional<std::pair<LockTarget, LockOutcome>>* taken;
    ~Giveback() {
      if (!*taken) return;
      asio::co_spawn(
          executor,
          [locker = locker, t = std::move(**taken)]() -> asio::awaitable<void> {
            co_await locker->Release(t.first, t.second.value);
          },
          asio::detached);
    }
  } giveback{locker_, co_await asio::this_coro::executor, &taken};
  RefitAnswer a = co_await Move(request, start);
  if (taken) {
    auto held = std::move(*taken);
    taken.reset();
    co_await locker_->Release(held.first, held.second.value);
  }
  co_return a;
}

asio::awaitable<RefitAnswer> RefitService::Move(const RefitRequest& request, TimePoint start) {
  // Found again under the lock: the pod may have changed while the lock was waited for.
  auto target = Locate(request);
  if (!target) co_return NotLocated(request, std::move(target.error().message));
  if (auto same = Unchanged(request, *target)) co_return std::move(*same);
  const PodView& pod = target->pod;
  auto chosen = Choose(request, *target);
  if (!chosen) co_return Refused(&pod, 200, std::move(chosen.error().message));
  if (auto done = co_await Commit(request, *target, *chosen, start); !done)
    co_return Refused(&pod, 200, std::move(done.error().message));
  RefitAnswer a;
  a.succeeded = true;
  a.moved = true;
  a.container_devices = EntryOf(*chosen);
  // The UUIDs come from annotations: escaped once for the log line and the event.
  const std::string message = k8s::EscapeControlChars(
      fmt::format("NUMA refit moved container {} from {} to {}", request.container_index,
                  UuidsOf(target->current), UuidsOf(*chosen)));
  spdlog::info("pod {} on node {}: {}", pod.Key(), request.node, message);
  writer_->Event(k8s::InvolvedObject::Of(pod), "Normal", "NumaRefitSucceeded", message);
  co_return a;
}

asio::awaitable<std::optional<RefitAnswer>> RefitService::Authenticate(const RefitRequest& request,
                                                                       std::string_view authorization) {
  if (options_.device_plugin_namespace.empty() || options_.device_plugin_service_account.empty())
    co_return Refused(nullptr, 503,
                      "refit callers cannot be authenticated: --device-plugin-namespace and "
                      "--device-plugin-service-account are not set");
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() || !authorization.starts_with(kBearer))
    co_return Refused(nullptr, 401,
                      "caller authentication failed: want an Authorization: Bearer <service-account token> "
                      "header");
  const std::string token(authorization.substr(kBearer.size()));
  // Refused before any TokenReview: a review is spent only on what could be a service-account token.
  if (token.size() > kMaxTokenBytes || !JwtShaped(token))
    co_return Refused(nullptr, 401,
                      fmt::format("caller authentication failed: the token is not a service-account token (a "
                                  "JWT of at most {} bytes)",
                                  kMaxTokenBytes));
  const std::string hash = Sha256Hex(token);
  const TimePoint now = clock_->Now();
  auto kept = verdicts_.find(hash);
  if (kept != verdicts_.end() && kept->second.until <= now) {
    verdicts_.erase(kept);
    kept = verdicts_.end();
  }
  Verdict verdict;
  if (kept != verdicts_.end()) {
    verdict = kept->second;
  } else {
    RefitAnswer refused;
    auto reviewed = co_await ReviewOnce(token, hash, refused);
    if (!reviewed) co_return refused;
    verdict = std::move(*reviewed);
  }
  auto refused = co_await CheckCallerPod(request, verdict);
  if (refused) verdicts_.erase(hash);  // its pod moved on or is gone: asked again next time
  co_return refused;
}

asio::awaitable<std::optional<RefitService::Verdict>> RefitService::ReviewOnce(const std::string& token,
                                                                               const std::string& hash,
                                                                               RefitAnswer& refused) {
  const TimePoint now = clock_->Now();
  if (auto kept = rejected_.find(hash); kept != rejected_.end()) {
    if (kept->second.until > now) {
      refused = Refused(nullptr, kept->second.status, kept->second.reason);
      co_return std::nullopt;
    }
    rejected_.erase(kept);
  }
  // The API server's TokenReviews are no free resource for callers not yet known: a few at once.
  if (reviews_in_flight_ >= kMaxReviewsInFlight) {
    refused = Refused(nullptr, 429, "too many callers are being authenticated at once; retry");
    refused.retry_after = true;
    co_return std::nullopt;
  }
  ++reviews_in_flight_;
  struct InFlight {
    std::size_t* n;
    ~InFlight() { --*n; }
  } in_flight{&reviews_in_flight_};
  auto verdict = co_await Review(token, hash, refused);
  // Only what the token itself decides is kept: not a review that failed.
  if (!verdict && (refused.status == 401 || refused.status == 403)) Reject(hash, refused);
  co_return verdict;
}

void RefitService::Reject(const std::string& hash, const RefitAnswer& refused) {
  const TimePoint now = clock_->Now();
  if (rejected_.size() >= kRejectionsKept)
    std::erase_if(rejected_, [&](const auto& e) { return e.second.until <= now; });
  if (rejected_.size() >= kRejectionsKept) rejected_.clear();
  rejected_[hash] = Rejection{refused.status, refused.failure_reason, now + kRejectionTtl};
}

asio::awaitable<std::optional<RefitService::Verdict>> RefitService::Review(const std::string& token,
                                                                           const std::string& hash,
                                                                           RefitAnswer& refused) {
  auto review = co_await writer_->ReviewToken(token);
  if (!review) {
    // The API server's words (they may name our account and its rights) go to the log, not to the caller.
    spdlog::warn("refit: a caller's TokenReview failed: {}", k8s::EscapeControlChars(review.error().message));
    refused = Refused(nullptr, 503, "token review unavailable, retry");
    co_return std::nullopt;
  }
  if (!review->authenticated) {
    refused = Refused(nullptr, 401, "caller authentication failed: the token is not valid");
    co_return std::nullopt;
  }
  const std::string expected = fmt::format("system:serviceaccount:{}:{}", options_.device_plugin_namespace,
                                           options_.device_plugin_service_account);
  if (review->username != expected) {
    refused =
        Refused(nullptr, 403,
                fmt::format("caller authentication failed: {} is not the device plugin's service account {}",
                            Quoted(review->username, 128), expected));
    co_return std::nullopt;
  }
  Verdict v{OneExtra(*review, kPodNameExtra), OneExtra(*review, kPodUidExtra), {}};
  if (v.pod_name.empty() || v.pod_uid.empty()) {
    refused = Refused(nullptr, 403, "caller authentication failed: the token is not bound to a pod");
    co_return std::nullopt;
  }
  const TimePoint now = clock_->Now();
  v.until = now + options_.verdict_ttl;
  if (auto exp = TokenExpiry(token); exp && *exp < v.until) v.until = *exp;
  if (v.until > now) {
    if (verdicts_.size() >= kVerdictsKept)
      std::erase_if(verdicts_, [&](const auto& e) { return e.second.until <= now; });
    if (verdicts_.size() >= kVerdictsKept) verdicts_.clear();
    verdicts_[hash] = v;
  }
  co_return v;
}

asio::awaitable<std::optional<RefitAnswer>> RefitService::CheckCallerPod(const RefitRequest& request,
                                                                         const Verdict& verdict) {
  const std::string& ns = options_.device_plugin_namespace;
  const bool plain = static_cast<bool>(ValidateName("pod", verdict.pod_name, NameKind::kPod));
  const std::string shown = ns + "/" + (plain ? verdict.pod_name : Quoted(verdict.pod_name, 64));
  std::optional<PodView> caller;
  if (auto it = pods_->find(ns + "/" + verdict.pod_name);
      it != pods_->end() && it->second.uid == verdict.pod_uid) {
    caller = it->second;
  } else if (plain) {
    auto read = co_await writer_->ReadPod(ns, verdict.pod_name);
    if (read && read->uid == verdict.pod_uid) {
      caller = std::move(*read);
    } else if (!read && read.error().kind != ApiErrorKind::kNotFound) {
      co_return Refused(
          nullptr, 503,
          fmt::format("the caller's pod {} could not be read: {}", shown, read.error().message));
    }
  }
  if (!caller)
    co_return Refused(
        nullptr, 403,
        fmt::format("caller authentication failed: the pod {} the token is bound to does not exist", shown));
  if (caller->node_name != request.node || caller->Finished())
    co_return Refused(nullptr, 403,
                      fmt::format("caller authentication failed: the token's pod {} does not run on node {}",
                                  shown, request.node));
  co_return std::nullopt;
}

Result<RefitService::Target> RefitService::Locate(const RefitRequest& request) const {
  const std::string key = request.pod_ns + "/" + request.pod_name;
  auto it = pods_->find(key);
  if (it == pods_->end() || it->second.uid != request.pod_uid)
    return Error{fmt::format("pod {} (uid {}) is not known to the scheduler", key, request.pod_uid)};
  const PodView& pod = it->second;
  // Which node it is on instead is not told: the caller is the device plugin of the request's node only.
  if (pod.node_name != request.node)
    return Error{fmt::format("pod {} with that uid is not on node {}", key, request.node)};
  if (pod.Finished()) return Error{fmt::format("pod {} has finished", key)};
  if (pod.terminating) return Error{fmt::format("pod {} is being deleted", key)};
  if (ledger_->reserved(pod.UidOrKey()))
    return Error{fmt::format("pod {}'s binding is not shown by the watch yet; retry", key)};
  if (request.container_index >= pod.ContainerCount())
    return Error{fmt::format("container index {} is outside the pod's {} containers", request.container_index,
                             pod.ContainerCount())};
  const std::string& name = pod.ContainerAt(request.container_index).name;
  if (!request.container_name.empty() && name != request.container_name)
    return Error{fmt::format("container index {} is \"{}\", not \"{}\"", request.container_index, name,
                             request.container_name)};
  const Backend* backend = feed_->state().backends().Find(kRefitDeviceType);
  if (backend == nullptr) return Error{std::string("the NVIDIA backend is not enabled")};
  const BackendKeys& keys = backend->Spec().keys;
  // Only while the container's devices wait in the to-allocate list is it still being set up.
  if (auto pending = EntryAt(pod, keys.to_allocate, request.container_index); !pending)
    return Error{fmt::format("no pending allocation to refit: {}", pending.error().message)};
  auto current = EntryAt(pod, keys.allocated, request.container_index);
  if (!current) return current.error();
  // One request carries one size for all its cards: charges that differ cannot be fitted again as they are.
  for (const auto& d : *current) {
    if (d.mem != current->front().mem || d.cores != current->front().cores)
      return Error{
          fmt::format("container {}'s cards are charged differently from each other; a refit keeps one "
                      "size for all of them",
                      request.container_index)};
  }
  const auto mig = pod.annotations.find(std::string(keys::kMigAllocations));
  if (mig != pod.annotations.end() && !mig->second.empty())
    return Error{std::string("the pod holds MIG instances; MIG allocations are not refitted")};
  return Target{pod, backend, std::move(*current)};
}

Result<ContainerDevices> RefitService::Choose(const RefitRequest& request, const Target& target) {
  const ContainerDevices& current = target.current;
  const ClusterState& state = feed_->state();
  const NodeEntry* node = state.FindNode(request.node);
  if (node == nullptr) return Error{fmt::format("node {} is not known to the scheduler", request.node)};
  std::unordered_set<std::string_view> allowed(request.allowed.begin(), request.allowed.end());
  // MIG cards are left out of the allowed set: their instances are not placed by this fit.
  std::vector<std::string> usable;
  bool any_known = false;
  for (const DeviceInfo& card : node->devices) {
    if (card.vendor != target.backend->Vendor() || !allowed.contains(card.id)) continue;
    any_known = true;
    if (card.mode != "mig") usable.push_back(card.id);
  }
  if (!any_known) return Error{fmt::format("none of the allowed devices is a card of node {}", request.node)};
  if (usable.empty())
    return Error{std::string("every allowed card is in MIG mode; MIG cards are not refitted")};
  auto ctx = DecisionContext(target.pod, state, policies_);
  if (!ctx) return ctx.error();
  const int b = static_cast<int>(state.backends().IndexOf(target.backend->Vendor()));
  PodContext::Vendor& vendor = ctx->vendors[b];
  if (!vendor.uuids.use.empty())
    std::erase_if(usable, [&](const std::string& id) { return !SelectorAllowsUuid(vendor.uuids, id); });
  if (usable.empty()) return Error{std::string("no allowed card is one the pod's device selectors allow")};
  vendor.uuids.use = std::move(usable);
  ctx->quota_active = false;  // the same amounts move: the namespace's use does not change
  const PodAllocation* charged = state.FindPod(target.pod.UidOrKey());
  if (charged == nullptr)
    return Error{fmt::format("pod {} holds no charge on node {}", target.pod.Key(), request.node)};
  PodAllocation rest = *charged;
  auto& mine = rest.devices[target.backend->Vendor()];
  if (request.container_index < mine.size()) mine[request.container_index].clear();
  const PodAllocation* without[] = {charged};
  const PodAllocation* with[] = {&rest};
  PodRequests reqs;
  DeviceRequest one{.vendor = target.backend->Vendor(),
                    .count = static_cast<std::int32_t>(current.size()),
                    .memory = current.front().mem,
                    .cores = current.front().cores};
  reqs.containers.push_back({{b, one}});
  FitEngine engine(state.backends(), state.quotas());
  PodDevices out;
  std::string reason;
  if (!engine.FitWith(*ctx, reqs, *node, UsageOverlay{without, with}, &out, &reason))
    return Error{fmt::format("no allowed device fits: {}", reason)};
  return out[target.backend->Vendor()].at(0);
}

asio::awaitable<ApiResult<void>> RefitService::Patch(const RefitRequest& request, const Target& target,
                                                     const PodView& pod, const ContainerDevices& chosen) {
  if (pod.resource_version.empty())
    co_return ApiError{
        ApiErrorKind::kOther, 0, "",
        fmt::format("pod {}'s resourceVersion is not known: the write would not be guarded", pod.Key())};
  const BackendKeys& keys = target.backend->Spec().keys;
  json::object annotations;
  for (const std::string& key : {keys.to_allocate, keys.allocated}) {
    auto a = pod.annotations.find(key);
    auto value =
        ReplaceEntry(a == pod.annotations.end() ? "" : a->second, request.container_index, EntryOf(chosen));
    if (!value)
      co_return ApiError{ApiErrorKind::kOther, 0, "",
                         fmt::format("annotation {} of pod {}: {}", key, pod.Key(), value.error().message)};
    annotations[key] = std::move(*value);
  }
  // Guarded by the resourceVersion: a device plugin that took the entry meanwhile is never overwritten.
  const json::value patch = {
      {"metadata", {{"resourceVersion", pod.resource_version}, {"annotations", std::move(annotations)}}}};
  co_return co_await writer_->PatchPod(pod.ns, pod.name, patch, Budget::kDecision);
}

std::optional<std::string> RefitService::TooLate(TimePoint start) const {
  const auto left = start + options_.budget - clock_->Now();
  if (left >= options_.patch_reserve) return std::nullopt;
  return fmt::format("too late: {} ms of the device plugin's {} ms are left",
                     std::chrono::duration_cast<std::chrono::milliseconds>(left).count(),
                     options_.budget.count());
}

asio::awaitable<Result<void>> RefitService::Commit(const RefitRequest& request, const Target& target,
                                                   const ContainerDevices& chosen, TimePoint start) {
  if (auto late = TooLate(start)) co_return Error{std::move(*late)};
  // Charged before the write: a decision made while the patch is on its way sees the new cards taken.
  const BackendKeys& keys = target.backend->Spec().keys;
  PodView after = target.pod;
  bool replaced = true;
  for (const std::string& key : {keys.to_allocate, keys.allocated}) {
    auto value = ReplaceEntry(after.annotations[key], request.container_index, EntryOf(chosen));
    replaced = replaced && value;
    if (value) after.annotations[key] = std::move(*value);
  }
  if (replaced) feed_->RecordAllocation(after);
  auto written = co_await Patch(request, target, target.pod, chosen);
  if (!written && written.error().kind == ApiErrorKind::kConflict)
    written = co_await Retry(request, target, chosen, start);
  if (!written) {
    // The ledger goes back to what the watch last showed of the pod.
    auto cached = pods_->find(target.pod.Key());
    feed_->RecordAllocation(cached != pods_->end() && cached->second.uid == target.pod.uid ? cached->second
                                                                                           : target.pod);
    co_return Error{
        fmt::format("could not write pod {}'s annotations: {}", target.pod.Key(), written.error().message)};
  }
  co_return Result<void>{};
}

asio::awaitable<ApiResult<void>> RefitService::Retry(const RefitRequest& request, const Target& target,
                                                     const ContainerDevices& chosen, TimePoint start) {
  // The cache was behind, or someone wrote the pod meanwhile: read it once and try once more if the
  // container still waits for the cards it had. Each step only while the reserve is left, so that the
  // retry does not land long after the plugin gave up.
  if (auto late = TooLate(start)) co_return ApiError{ApiErrorKind::kOther, 0, "", std::move(*late)};
  const BackendKeys& keys = target.backend->Spec().keys;
  auto fresh = co_await writer_->ReadPod(request.pod_ns, request.pod_name);
  const bool waits = fresh && fresh->uid == target.pod.uid && fresh->node_name == request.node &&
                     EntryAt(*fresh, keys.to_allocate, request.container_index) && [&] {
                       auto had = EntryAt(*fresh, keys.allocated, request.container_index);
                       return had && *had == target.current;
                     }();
  if (!waits)
    co_return ApiError{ApiErrorKind::kConflict, 409, "",
                       "the pod changed while it was refitted and the container no longer waits for the "
                       "cards it had"};
  if (auto late = TooLate(start)) co_return ApiError{ApiErrorKind::kOther, 0, "", std::move(*late)};
  auto written = co_await Patch(request, target, *fresh, chosen);
  if (!written) co_return written;
  // Charged again from the pod as written: the cache's copy may lack an earlier refit of the pod.
  PodView after = *fresh;
  for (const std::string& key : {keys.to_allocate, keys.allocated}) {
    auto value = ReplaceEntry(after.annotations[key], request.container_index, EntryOf(chosen));
    if (!value) co_return written;
    after.annotations[key] = std::move(*value);
  }
  feed_->RecordAllocation(after);
  co_return written;
}

void RefitService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Family("hami_scheduler_refit_duration_seconds",
           "Time to answer /refit, including the caller's TokenReview.", "histogram");
  latency_.Write(w, "hami_scheduler_refit_duration_seconds", {});
  w.Family("hami_scheduler_refit_total",
           "/refit answers by result (moved, unchanged, refused, invalid, unauthenticated, forbidden, "
           "unavailable).",
           "counter");
  for (const char* result :
       {"moved", "unchanged", "refused", "invalid", "unauthenticated", "forbidden", "unavailable"}) {
    auto it = results_.find(result);
    w.Sample("hami_scheduler_refit_total", {{"result", result}},
             static_cast<double>(it == results_.end() ? 0 : it->second));
  }
  w.Gauge("hami_scheduler_refit_verdicts_kept", "Callers' TokenReview verdicts kept (each at most a minute).",
          static_cast<double>(verdicts_.size()));
}

}  // namespace hami::extender
