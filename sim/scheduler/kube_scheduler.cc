#include "sim/scheduler/kube_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <deque>
#include <initializer_list>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "core/codec/stamps.h"
#include "core/strings.h"
#include "k8s/http_client.h"
#include "k8s/reflector.h"

namespace hami::sim {
namespace asio = boost::asio;
namespace json = boost::json;
using SteadyClock = std::chrono::steady_clock;

using k8s::FindKey;
using k8s::ParseObject;
using k8s::StringFieldAnyCase;

namespace {

// kube-scheduler's spam limit for one pod's identical FailedScheduling messages.
constexpr std::chrono::seconds kEventRepeatInterval{10};
// Events waiting to be posted beyond this are dropped (the API server is not keeping up).
constexpr std::size_t kMaxQueuedEvents = 1000;

bool IsNull(const json::value* v) { return v == nullptr || v->is_null(); }

// The string at `path` in an API object ("" when absent or not a string).
std::string Field(const json::value& object, std::initializer_list<std::string_view> path) {
  const json::value* v = &object;
  for (std::string_view step : path) {
    if (!v->is_object()) return "";
    v = v->get_object().if_contains(step);
    if (v == nullptr) return "";
  }
  return v->is_string() ? std::string(v->get_string()) : "";
}

Result<std::map<std::string, std::string>> StringMapField(const json::object& o, std::string_view key) {
  std::map<std::string, std::string> out;
  const json::value* v = FindKey(o, key);
  if (IsNull(v)) return out;
  if (!v->is_object())
    return Error{fmt::format("ExtenderFilterResult.{}: expected a map of node to reason", key)};
  for (const auto& kv : v->get_object()) {
    if (!kv.value().is_string()) {
      return Error{fmt::format("ExtenderFilterResult.{}[{}]: expected a string", key, std::string(kv.key()))};
    }
    out.emplace(std::string(kv.key()), std::string(kv.value().get_string()));
  }
  return out;
}

// The body of a 200 answer to POST <url>, or kube-scheduler's error for anything else.
Result<std::string> ExtenderAnswer(std::string_view verb, const std::string& url,
                                   const k8s::TransportResult<k8s::HttpResponse>& response) {
  if (!response) return Error{fmt::format("Post \"{}\": {}", url, response.error().message)};
  if (response->status != 200) {
    return Error{fmt::format("failed {} with extender at URL {}, code {}", verb, url, response->status)};
  }
  return Ok(response->body);
}

k8s::HttpRequest PostJson(const std::string& target, const std::string& body) {
  k8s::HttpRequest request;
  request.verb = boost::beast::http::verb::post;
  request.target = target;
  request.body = body;
  request.content_type = "application/json";
  return request;
}

std::string SchedulerNameOf(const json::value& pod) {
  std::string name = Field(pod, {"spec", "schedulerName"});
  return name.empty() ? "default-scheduler" : name;  // the API server's default
}

// Pods kube-scheduler leaves alone even when unassigned: finished or being deleted.
bool Schedulable(const json::value& pod) {
  const std::string phase = Field(pod, {"status", "phase"});
  if (phase == "Succeeded" || phase == "Failed") return false;
  const auto* md = pod.is_object() ? pod.get_object().if_contains("metadata") : nullptr;
  return md == nullptr || !md->is_object() || IsNull(md->get_object().if_contains("deletionTimestamp"));
}

}  // namespace

// ---- Wire functions.

Result<ExtenderEndpoint> ParseExtenderUrl(std::string_view url) {
  ExtenderEndpoint endpoint;
  if (auto ok = k8s::SetServer(url, endpoint.config); !ok) {
    return Error{fmt::format("extender URL: {}", ok.error().message)};
  }
  if (auto port = ParseIntInRange(endpoint.config.port, "extender URL port", 1, 65535); !port) {
    return Error{fmt::format("extender URL '{}': {}", url, port.error().message)};
  }
  std::string_view rest = url.substr(url.find("://") + 3);
  std::string_view path = rest.find('/') == std::string_view::npos ? "" : rest.substr(rest.find('/'));
  if (path.find_first_of("?#") != std::string_view::npos) {
    return Error{fmt::format("extender URL '{}': want no query or fragment, only a path prefix", url)};
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  endpoint.path_prefix = std::string(path);
  endpoint.url = std::string(url);
  endpoint.config.insecure_skip_tls_verify = endpoint.config.tls();  // kube-scheduler without a CA
  return endpoint;
}

std::string FilterArgsWithNodeNames(const json::value& pod, const std::vector<std::string>& node_names) {
  json::array names;
  for (const auto& n : node_names) names.emplace_back(n);
  json::object args;
  args["Pod"] = pod;
  args["Nodes"] = nullptr;
  args["NodeNames"] = std::move(names);
  return json::serialize(args);
}

std::string FilterArgsWithNodes(const json::value& pod, const std::vector<json::value>& nodes) {
  json::object args;
  args["Pod"] = pod;
  args["Nodes"] =
      json::object{{"metadata", json::object{}}, {"items", json::array(nodes.begin(), nodes.end())}};
  args["NodeNames"] = nullptr;
  return json::serialize(args);
}

Result<k8s::ExtenderFilterResult> ParseFilterResult(std::string_view body) {
  auto root = ParseObject(body, "ExtenderFilterResult");
  if (!root) return root.error();
  k8s::ExtenderFilterResult result;
  if (const json::value* nodes = FindKey(*root, "Nodes"); !IsNull(nodes)) {
    const json::value* items = nodes->is_object() ? FindKey(nodes->get_object(), "items") : nullptr;
    if (!nodes->is_object() || !(IsNull(items) || items->is_array())) {
      return Error{"ExtenderFilterResult.Nodes: expected a NodeList with items"};
    }
    result.nodes.emplace();
    if (!IsNull(items)) result.nodes->assign(items->get_array().begin(), items->get_array().end());
  }
  if (const json::value* names = FindKey(*root, "NodeNames"); !IsNull(names)) {
    if (!names->is_array()) return Error{"ExtenderFilterResult.NodeNames: expected a list of node names"};
    result.node_names.emplace();
    for (const auto& n : names->get_array()) {
      if (!n.is_string()) return Error{"ExtenderFilterResult.NodeNames: every entry must be a string"};
      result.node_names->emplace_back(n.get_string());
    }
  }
  auto failed = StringMapField(*root, "FailedNodes");
  if (!failed) return failed.error();
  result.failed_nodes = std::move(*failed);
  auto unresolvable = StringMapField(*root, "FailedAndUnresolvableNodes");
  if (!unresolvable) return unresolvable.error();
  result.failed_and_unresolvable = std::move(*unresolvable);
  auto error = StringFieldAnyCase(*root, "Error", "ExtenderFilterResult");
  if (!error) return error.error();
  result.error = std::move(*error);
  return result;
}

Result<std::vector<std::pair<std::string, std::int64_t>>> ParseHostPriorityList(std::string_view body) {
  json::error_code ec;
  const json::value root = json::parse(body, ec);
  if (ec) return Error{fmt::format("HostPriorityList: invalid JSON: {}", ec.message())};
  if (!root.is_array()) return Error{"HostPriorityList: expected a list of {Host, Score}"};
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const auto& entry : root.get_array()) {
    const json::value* host = entry.is_object() ? FindKey(entry.get_object(), "Host") : nullptr;
    const json::value* score = entry.is_object() ? FindKey(entry.get_object(), "Score") : nullptr;
    if (host == nullptr || !host->is_string() || score == nullptr || !score->is_int64())
      return Error{"HostPriorityList: every entry needs a string Host and an integer Score"};
    out.emplace_back(std::string(host->get_string()), score->get_int64());
  }
  return out;
}

std::string HighestScored(const std::vector<std::string>& feasible,
                          const std::vector<std::pair<std::string, std::int64_t>>& scores) {
  std::map<std::string, std::int64_t> by_host(scores.begin(), scores.end());
  std::string best;
  std::int64_t top = 0;
  for (const std::string& node : feasible) {
    auto it = by_host.find(node);
    const std::int64_t score = it == by_host.end() ? 0 : it->second;
    if (best.empty() || score > top) {
      best = node;
      top = score;
    }
  }
  return best;
}

FilterVerdict ReadFilterResult(const k8s::ExtenderFilterResult& result, const std::vector<std::string>& input,
                               bool node_cache_capable) {
  FilterVerdict verdict;
  if (!result.error.empty()) {
    verdict.error = result.error;
    return verdict;
  }
  std::vector<std::string> claimed;
  if (node_cache_capable && result.node_names) {
    claimed = *result.node_names;
  } else if (result.nodes) {
    for (const auto& item : *result.nodes) claimed.push_back(Field(item, {"metadata", "name"}));
  }
  const std::set<std::string> sent(input.begin(), input.end());
  for (const auto& name : claimed) {
    if (!sent.contains(name)) {
      verdict.error = fmt::format(
          "extender claims a filtered node \"{}\" which is not found in the input node list", name);
      verdict.feasible.clear();
      return verdict;
    }
    verdict.feasible.push_back(name);
  }
  verdict.failed_nodes = result.failed_nodes;
  // A node in both maps counts as unresolvable, as kube-scheduler reads it.
  for (const auto& [node, reason] : result.failed_and_unresolvable) verdict.failed_nodes[node] = reason;
  return verdict;
}

std::string BindingArgsJson(const k8s::ExtenderBindingArgs& args) {
  json::object o;
  o["PodName"] = args.pod_name;
  o["PodNamespace"] = args.pod_namespace;
  o["PodUID"] = args.pod_uid;
  o["Node"] = args.node;
  return json::serialize(o);
}

Result<std::string> ParseBindingResult(std::string_view body) {
  auto root = ParseObject(body, "ExtenderBindingResult");
  if (!root) return root.error();
  return StringFieldAnyCase(*root, "Error", "ExtenderBindingResult");
}

std::string UnschedulableMessage(std::size_t node_count, const std::map<std::string, std::string>& failed) {
  std::map<std::string, int> nodes_per_reason;
  for (const auto& [node, reason] : failed) ++nodes_per_reason[reason];
  std::vector<std::string> entries;
  for (const auto& [reason, count] : nodes_per_reason) entries.push_back(fmt::format("{} {}", count, reason));
  std::sort(entries.begin(), entries.end());
  if (entries.empty()) return fmt::format("0/{} nodes are available.", node_count);
  return fmt::format("0/{} nodes are available: {}.", node_count, Join(entries, ", "));
}

json::value FailedSchedulingEvent(const json::value& pod, std::string_view message,
                                  std::string_view component, std::chrono::system_clock::time_point now) {
  std::string ns = Field(pod, {"metadata", "namespace"});
  if (ns.empty()) ns = "default";
  const std::string name = Field(pod, {"metadata", "name"});
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::string stamp = codec::FormatRfc3339(now);
  return json::object{{"apiVersion", "v1"},
                      {"kind", "Event"},
                      {"metadata", {{"name", fmt::format("{}.{:x}", name, nanos)}, {"namespace", ns}}},
                      {"involvedObject",
                       {{"kind", "Pod"},
                        {"namespace", ns},
                        {"name", name},
                        {"uid", Field(pod, {"metadata", "uid"})},
                        {"apiVersion", "v1"},
                        {"resourceVersion", Field(pod, {"metadata", "resourceVersion"})}}},
                      {"reason", "FailedScheduling"},
                      {"message", message},
                      {"source", {{"component", component}}},
                      {"reportingComponent", component},
                      {"reportingInstance", ""},
                      {"firstTimestamp", stamp},
                      {"lastTimestamp", stamp},
                      {"count", 1},
                      {"type", "Warning"}};
}

// ---- The stand-in.

struct KubeSchedulerStandIn::Impl {
  using State = PodOutcome::State;
  enum class Phase { kWaiting, kScheduling, kBinding };
  struct Queued {
    std::string uid;
    Phase phase = Phase::kWaiting;
    int failures = 0;  // consecutive failed attempts: the backoff exponent
    SteadyClock::time_point ready_at;
    std::uint64_t order = 0;  // arrival order, first in first out among pods ready at once
    std::uint64_t cycle = 0;  // the scheduling cycle that owns the pod now
    bool moved = false;       // a cluster event happened during the cycle: retry at once if it fails
  };
  struct BindJob {
    std::string key;
    k8s::ExtenderBindingArgs args;
    std::uint64_t cycle = 0;
  };
  struct PendingEvent {
    std::string ns;
    json::value event;
  };

  Impl(KubeSchedulerStandIn& owner, k8s::ApiClient& client, StandInOptions options)
      : owner_(&owner),
        client_(&client),
        options_(std::move(options)),
        max_binds_(static_cast<std::size_t>(std::max(1, options_.max_binds_in_flight))),
        nodes_(client, NodeReflectorOptions(options_), NodeHandlers()),
        pods_(client, PodReflectorOptions(), PodHandlers()) {}

  static k8s::Reflector::Options NodeReflectorOptions(const StandInOptions& options) {
    k8s::Reflector::Options o;
    o.path = "/api/v1/nodes";
    o.keep_objects = !options.node_cache_capable;  // the Nodes form sends whole node objects
    return o;
  }
  static k8s::Reflector::Options PodReflectorOptions() {
    k8s::Reflector::Options o;
    o.path =
        "/api/v1/pods";  // all pods: deletions of assigned pods requeue, assignments end our queue entries
    return o;
  }
  k8s::Reflector::Handlers NodeHandlers() {
    k8s::Reflector::Handlers h;
    h.on_add = [this](const json::value&) { RequeueAll(); };
    h.on_update = [this](const json::value&, const json::value&) { RequeueAll(); };
    h.on_synced = [this] { WakeScheduler(); };
    return h;
  }
  k8s::Reflector::Handlers PodHandlers() {
    k8s::Reflector::Handlers h;
    h.on_add = [this](const json::value& pod) { OnPod(pod); };
    h.on_update = [this](const json::value&, const json::value& pod) { OnPod(pod); };
    h.on_delete = [this](const json::value& pod) { OnPodDeleted(pod); };
    h.on_synced = [this] { WakeScheduler(); };
    return h;
  }

  // ---- Run: the informers, the scheduling loop, the bind workers and the event sender, all cancelled
  // together.

  asio::awaitable<void> Run() {
    auto endpoint = ParseExtenderUrl(options_.extender_url);
    if (!endpoint) throw std::invalid_argument(endpoint.error().message);
    auto executor = co_await asio::this_coro::executor;
    auto http = k8s::HttpClient::Create(executor, endpoint->config, max_binds_ + 1);
    if (!http)
      throw std::invalid_argument(fmt::format("extender {}: {}", endpoint->url, http.error().message));
    endpoint_ = std::move(*endpoint);
    http_ = std::move(*http);
    schedule_wake_.emplace(executor, SteadyClock::time_point::max());
    bind_wake_.emplace(executor, SteadyClock::time_point::max());
    event_wake_.emplace(executor, SteadyClock::time_point::max());

    using Task = decltype(asio::co_spawn(executor, std::declval<asio::awaitable<void>>(), asio::deferred));
    std::vector<Task> tasks;
    tasks.push_back(asio::co_spawn(executor, nodes_.Run(), asio::deferred));
    tasks.push_back(asio::co_spawn(executor, pods_.Run(), asio::deferred));
    tasks.push_back(asio::co_spawn(executor, ScheduleLoop(), asio::deferred));
    tasks.push_back(asio::co_spawn(executor, SendEvents(), asio::deferred));
    for (std::size_t i = 0; i < max_binds_; ++i)
      tasks.push_back(asio::co_spawn(executor, BindWorker(), asio::deferred));
    auto [order, errors] = co_await asio::experimental::make_parallel_group(std::move(tasks))
                               .async_wait(asio::experimental::wait_for_one_error(), asio::use_awaitable);
    // The first task to end (a cancellation, or a failure that cancelled the rest) says why.
    if (!order.empty() && errors[order.front()]) std::rethrow_exception(errors[order.front()]);
    throw boost::system::system_error(asio::error::operation_aborted, "kube-scheduler stand-in stopped");
  }

  // ---- The scheduling cycle: one pod at a time.

  asio::awaitable<void> ScheduleLoop() {
    for (;;) {
      const std::string key = co_await NextPod();
      co_await ScheduleOne(key);
    }
  }

  // The next pod whose backoff is over, once the caches have synced and a bind slot is free.
  asio::awaitable<std::string> NextPod() {
    for (;;) {
      auto deadline = SteadyClock::time_point::max();
      if (nodes_.synced() && pods_.synced() && binds_in_flight_ < max_binds_) {
        auto next = queue_.end();
        for (auto it = queue_.begin(); it != queue_.end(); ++it) {
          if (it->second.phase != Phase::kWaiting) continue;
          if (next == queue_.end() || std::pair(it->second.ready_at, it->second.order) <
                                          std::pair(next->second.ready_at, next->second.order)) {
            next = it;
          }
        }
        if (next != queue_.end()) {
          if (next->second.ready_at <= SteadyClock::now()) co_return next->first;
          deadline = next->second.ready_at;
        }
      }
      schedule_wake_->expires_at(deadline);
      co_await schedule_wake_->async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  asio::awaitable<void> ScheduleOne(const std::string& key) {
    const auto pod_it = pods_.items().find(key);
    if (pod_it == pods_.items().end()) {
      queue_.erase(key);
      co_return;
    }
    const json::value pod = pod_it->second;  // a copy: the cache moves on while the extender thinks
    Queued& entry = queue_.at(key);
    entry.phase = Phase::kScheduling;
    entry.moved = false;
    const std::uint64_t cycle = entry.cycle = ++cycles_;

    std::vector<std::string> names;
    std::vector<json::value> node_objects;
    for (const auto& [name, node] : nodes_.items()) {
      names.push_back(name);
      if (!options_.node_cache_capable) node_objects.push_back(node);
    }
    if (names.empty()) {
      ++stats_.unschedulable;
      const std::string message = "no nodes available to schedule pods";
      Failed(key, State::kUnschedulable, message, {});
      RecordFailedScheduling(key, pod, message);
      co_return;
    }

    ++stats_.filters;
    ++outcomes_[key].attempts;
    const std::string body = options_.node_cache_capable ? FilterArgsWithNodeNames(pod, names)
                                                         : FilterArgsWithNodes(pod, node_objects);
    const k8s::HttpRequest request = PostJson(endpoint_.VerbTarget("filter"), body);
    const auto response = co_await http_->Send(request, options_.http_timeout);
    if (!Current(key, cycle)) co_return;  // deleted or bound by someone else meanwhile

    const FilterVerdict verdict = ReadFilterResponse(response, names);
    if (!verdict.error.empty()) {
      ++stats_.filter_errors;
      Failed(key, State::kError, verdict.error, {});
      RecordFailedScheduling(key, pod, verdict.error);
    } else if (verdict.feasible.empty()) {
      ++stats_.unschedulable;
      const std::string message = UnschedulableMessage(names.size(), verdict.failed_nodes);
      Failed(key, State::kUnschedulable, message, verdict.failed_nodes);
      RecordFailedScheduling(key, pod, message);
    } else {
      std::string node = verdict.feasible.front();
      if (options_.prioritize && verdict.feasible.size() > 1) {
        node = co_await Prioritize(pod, verdict.feasible, node_objects);
        if (!Current(key, cycle)) co_return;
      }
      Assume(key, pod, node, cycle);
    }
  }

  // The node kube-scheduler would take with only the extender's scores to go by; the first feasible node
  // when the extender's answer cannot be read.
  asio::awaitable<std::string> Prioritize(const json::value& pod, const std::vector<std::string>& feasible,
                                          const std::vector<json::value>& node_objects) {
    std::vector<json::value> feasible_objects;
    if (!options_.node_cache_capable) {
      for (const json::value& node : node_objects) {
        const std::string name = Field(node, {"metadata", "name"});
        if (std::find(feasible.begin(), feasible.end(), name) != feasible.end())
          feasible_objects.push_back(node);
      }
    }
    const std::string body = options_.node_cache_capable ? FilterArgsWithNodeNames(pod, feasible)
                                                         : FilterArgsWithNodes(pod, feasible_objects);
    const auto response =
        co_await http_->Send(PostJson(endpoint_.VerbTarget("prioritize"), body), options_.http_timeout);
    auto answer = ExtenderAnswer("prioritize", endpoint_.VerbUrl("prioritize"), response);
    if (!answer) co_return feasible.front();
    auto scores = ParseHostPriorityList(*answer);
    if (!scores) co_return feasible.front();
    co_return HighestScored(feasible, *scores);
  }

  FilterVerdict ReadFilterResponse(const k8s::TransportResult<k8s::HttpResponse>& response,
                                   const std::vector<std::string>& names) const {
    FilterVerdict verdict;
    auto body = ExtenderAnswer("filter", endpoint_.VerbUrl("filter"), response);
    if (!body) {
      verdict.error = body.error().message;
      return verdict;
    }
    auto result = ParseFilterResult(*body);
    if (!result) {
      verdict.error = result.error().message;
      return verdict;
    }
    return ReadFilterResult(*result, names, options_.node_cache_capable);
  }

  // The pod is placed on `node` in kube-scheduler's mind; the bind happens in the background.
  void Assume(const std::string& key, const json::value& pod, const std::string& node, std::uint64_t cycle) {
    queue_.at(key).phase = Phase::kBinding;
    BindJob job{key, {}, cycle};
    job.args.pod_name = Field(pod, {"metadata", "name"});
    job.args.pod_namespace = Field(pod, {"metadata", "namespace"});
    job.args.pod_uid = Field(pod, {"metadata", "uid"});
    job.args.node = node;
    bind_jobs_.push_back(std::move(job));
    ++binds_in_flight_;
    stats_.max_binds_seen = std::max(stats_.max_binds_seen, binds_in_flight_);
    bind_wake_->cancel();
  }

  // Whether `cycle` still owns the pod: it was neither deleted nor bound by someone else since.
  bool Current(const std::string& key, std::uint64_t cycle) const {
    auto it = queue_.find(key);
    return it != queue_.end() && it->second.cycle == cycle;
  }

  // Back to the queue after the backoff (at once if the cluster changed during the attempt).
  void Failed(const std::string& key, State state, const std::string& message,
              const std::map<std::string, std::string>& failed_nodes) {
    Queued& entry = queue_.at(key);
    entry.phase = Phase::kWaiting;
    ++entry.failures;
    entry.ready_at =
        SteadyClock::now() + (entry.moved ? std::chrono::milliseconds(0) : Backoff(entry.failures));
    PodOutcome& outcome = outcomes_[key];
    outcome.state = state;
    outcome.message = message;
    if (state == State::kUnschedulable) outcome.failed_nodes = failed_nodes;
    Publish(outcome);
  }

  std::chrono::milliseconds Backoff(int failures) const {
    std::chrono::milliseconds d = options_.initial_backoff;
    for (int i = 1; i < failures && d < options_.max_backoff; ++i) d *= 2;
    return std::min(d, options_.max_backoff);
  }

  // ---- The binding cycle: up to max_binds_in_flight at once.

  asio::awaitable<void> BindWorker() {
    for (;;) {
      if (bind_jobs_.empty()) {
        co_await bind_wake_->async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      const BindJob job = std::move(bind_jobs_.front());
      bind_jobs_.pop_front();
      co_await BindOne(job);
      --binds_in_flight_;
      WakeScheduler();
    }
  }

  asio::awaitable<void> BindOne(const BindJob& job) {
    if (!Current(job.key, job.cycle)) co_return;  // deleted while waiting for a worker
    const k8s::HttpRequest request = PostJson(endpoint_.VerbTarget("bind"), BindingArgsJson(job.args));
    const auto response = co_await http_->Send(request, options_.http_timeout);
    const std::string error = BindError(response);
    if (error.empty()) {
      ++stats_.binds;
    } else {
      ++stats_.bind_failures;
    }
    if (!Current(job.key, job.cycle)) co_return;
    const auto pod_it = pods_.items().find(job.key);
    const std::string assigned =
        pod_it == pods_.items().end() ? "" : Field(pod_it->second, {"spec", "nodeName"});
    if (error.empty()) {
      Bound(job.key, job.args.node, job.args.pod_uid, "");
    } else if (!assigned.empty()) {
      Bound(job.key, assigned, job.args.pod_uid, "");  // the answer was lost but the binding happened
    } else if (pod_it != pods_.items().end()) {
      // kube-scheduler forgets the assumed pod and schedules it again.
      const json::value pod = pod_it->second;
      Failed(job.key, State::kError, error, {});
      RecordFailedScheduling(job.key, pod, fmt::format("binding rejected: {}", error));
    }
  }

  std::string BindError(const k8s::TransportResult<k8s::HttpResponse>& response) const {
    auto body = ExtenderAnswer("bind", endpoint_.VerbUrl("bind"), response);
    if (!body) return body.error().message;
    auto error = ParseBindingResult(*body);
    return error ? *error : error.error().message;
  }

  void Bound(const std::string& key, const std::string& node, const std::string& uid,
             const std::string& message) {
    queue_.erase(key);
    bound_uid_[key] = uid;
    PodOutcome& outcome = outcomes_[key];
    outcome.state = State::kBound;
    outcome.node = node;
    outcome.message = message;
    outcome.bound_at = SteadyClock::now();
    Publish(outcome);
  }

  // ---- Informer events.

  void OnPod(const json::value& pod) {
    if (SchedulerNameOf(pod) != options_.scheduler_name) return;
    const std::string key = k8s::ObjectKeyOf(pod);
    const std::string uid = Field(pod, {"metadata", "uid"});
    if (const std::string node = Field(pod, {"spec", "nodeName"}); !node.empty()) {
      Assigned(key, node, uid);
      return;
    }
    if (!Schedulable(pod)) {
      Forget(key, "finished or being deleted before it was bound");
      return;
    }
    // A late event from before our own bind (the extender patches the pod during filter) is not a new pod.
    if (auto bound = bound_uid_.find(key); bound != bound_uid_.end() && bound->second == uid) return;
    if (auto it = queue_.find(key); it != queue_.end()) {
      if (it->second.uid == uid) return;  // queued already; each cycle reads the latest object
      queue_.erase(it);                   // deleted and created again under the same name
    }
    Queued entry;
    entry.uid = uid;
    entry.ready_at = SteadyClock::now();
    entry.order = ++arrivals_;
    queue_.emplace(key, std::move(entry));
    PodOutcome outcome;
    outcome.key = key;
    outcome.first_seen = SteadyClock::now();
    outcomes_[key] = outcome;
    Publish(outcomes_[key]);
    WakeScheduler();
  }

  void Assigned(const std::string& key, const std::string& node, const std::string& uid) {
    auto it = queue_.find(key);
    if (it == queue_.end() || it->second.phase == Phase::kBinding) return;  // our bind's answer decides
    Bound(key, node, uid, "bound by another binder");
  }

  void OnPodDeleted(const json::value& pod) {
    if (SchedulerNameOf(pod) == options_.scheduler_name) {
      const std::string key = k8s::ObjectKeyOf(pod);
      bound_uid_.erase(key);
      events_sent_.erase(key);
      Forget(key, "deleted before it was bound");
    }
    RequeueAll();  // whatever it held is free now
  }

  void Forget(const std::string& key, const std::string& message) {
    if (queue_.erase(key) == 0) return;
    PodOutcome& outcome = outcomes_[key];
    outcome.state = State::kDeleted;
    outcome.message = message;
    Publish(outcome);
  }

  // A cluster event: every waiting pod is tried again now (and one in a cycle right after, if it fails).
  void RequeueAll() {
    const auto now = SteadyClock::now();
    for (auto& [key, entry] : queue_) {
      if (entry.phase == Phase::kWaiting) {
        entry.ready_at = std::min(entry.ready_at, now);
      } else {
        entry.moved = true;
      }
    }
    WakeScheduler();
  }

  void WakeScheduler() {
    if (schedule_wake_) schedule_wake_->cancel();
  }

  void Publish(const PodOutcome& outcome) {
    if (owner_->on_outcome) owner_->on_outcome(outcome);
  }

  // ---- FailedScheduling events, posted in order by one sender.

  void RecordFailedScheduling(const std::string& key, const json::value& pod, const std::string& message) {
    const auto now = SteadyClock::now();
    auto& sent_at = events_sent_[key];
    if (auto last = sent_at.find(message);
        last != sent_at.end() && now - last->second < kEventRepeatInterval) {
      ++stats_.events_suppressed;
      return;
    }
    sent_at[message] = now;
    if (events_.size() >= kMaxQueuedEvents) {
      ++stats_.event_failures;
      return;
    }
    // Event names carry the time in nanoseconds: keep them distinct even within one clock tick.
    auto wall = std::chrono::system_clock::now();
    if (wall <= last_event_wall_) wall = last_event_wall_ + std::chrono::microseconds(1);
    last_event_wall_ = wall;
    PendingEvent event{Field(pod, {"metadata", "namespace"}), {}};
    if (event.ns.empty()) event.ns = "default";
    event.event = FailedSchedulingEvent(pod, message, options_.scheduler_name, wall);
    events_.push_back(std::move(event));
    event_wake_->cancel();
  }

  asio::awaitable<void> SendEvents() {
    for (;;) {
      if (events_.empty()) {
        co_await event_wake_->async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      const PendingEvent event = std::move(events_.front());
      events_.pop_front();
      const std::string path = k8s::PathFor("v1", "events", event.ns);
      const auto created = co_await client_->Create(path, event.event);
      if (created) {
        ++stats_.events;
      } else {
        ++stats_.event_failures;
      }
    }
  }

  KubeSchedulerStandIn* owner_;
  k8s::ApiClient* client_;
  StandInOptions options_;
  std::size_t max_binds_;
  ExtenderEndpoint endpoint_;
  std::unique_ptr<k8s::HttpClient> http_;
  std::optional<asio::steady_timer> schedule_wake_, bind_wake_, event_wake_;

  std::map<std::string, Queued> queue_;  // pending pods of ours, by ns/name
  std::map<std::string, std::string> bound_uid_;
  std::uint64_t arrivals_ = 0, cycles_ = 0;
  std::deque<BindJob> bind_jobs_;
  std::size_t binds_in_flight_ = 0;  // waiting for a worker or running
  std::deque<PendingEvent> events_;
  std::map<std::string, std::map<std::string, SteadyClock::time_point>>
      events_sent_;  // pod -> message -> when
  std::chrono::system_clock::time_point last_event_wall_{};
  std::map<std::string, PodOutcome> outcomes_;
  Stats stats_;

  // Last: their handlers use everything above.
  k8s::Reflector nodes_;
  k8s::Reflector pods_;
};

KubeSchedulerStandIn::KubeSchedulerStandIn(k8s::ApiClient& client, StandInOptions options)
    : impl_(std::make_unique<Impl>(*this, client, std::move(options))) {}

KubeSchedulerStandIn::~KubeSchedulerStandIn() = default;

asio::awaitable<void> KubeSchedulerStandIn::Run() { return impl_->Run(); }

const std::map<std::string, PodOutcome>& KubeSchedulerStandIn::outcomes() const { return impl_->outcomes_; }

const KubeSchedulerStandIn::Stats& KubeSchedulerStandIn::stats() const { return impl_->stats_; }

}  // namespace hami::sim
