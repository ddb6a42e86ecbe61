#pragma once
// A stand-in for kube-scheduler that drives a scheduler extender over real HTTP the way kube-scheduler does,
// for the demo and the integration tests: it watches nodes and pods, runs one scheduling cycle at a time
// (POST <extender>/filter with the pod and every node), binds through POST <extender>/bind asynchronously,
// requeues failures with per-pod exponential backoff (and at once on cluster events), and records
// FailedScheduling events on pods it cannot place. It has no in-tree plugins: the extender decides alone.
//
// Everything runs as coroutines on the caller's executor (the one event loop); not thread-safe.
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "k8s/api_client.h"
#include "k8s/extender.h"
#include "k8s/rest_config.h"

namespace hami::sim {

struct StandInOptions {
  std::string scheduler_name = "hami-scheduler";  // only pods with this spec.schedulerName
  std::string extender_url;        // "http://127.0.0.1:PORT" (https too, insecure like HAMi's tlsConfig)
  bool node_cache_capable = true;  // true: send NodeNames; false: send Nodes (NodeList of full node objects)
  std::chrono::milliseconds http_timeout{30000};  // as HAMi's KubeSchedulerConfiguration httpTimeout
  std::chrono::milliseconds initial_backoff{
      100};  // per pod, doubling (kube-scheduler: podInitialBackoffSeconds)
  std::chrono::milliseconds max_backoff{2000};
  int max_binds_in_flight = 16;  // binds run concurrently (kube-scheduler's binding cycle is async)
  // prioritizeVerb registered: with more than one feasible node, POST /prioritize and take the highest score
  // (ties: the extender's first); an error there is ignored, as kube-scheduler ignores it.
  bool prioritize = false;
};

struct PodOutcome {
  std::string key;   // ns/name
  std::string node;  // bound node ("" until bound)
  // kDeleted: the pod was deleted before it was bound (it left the queue).
  enum class State { kPending, kBound, kUnschedulable, kError, kDeleted } state = State::kPending;
  std::string message;  // last reason: FailedNodes summary, extender Error, bind error
  std::map<std::string, std::string> failed_nodes;  // from the last unschedulable filter
  int attempts = 0;                                 // filter calls
  std::chrono::steady_clock::time_point first_seen, bound_at;
};

class KubeSchedulerStandIn {
 public:
  KubeSchedulerStandIn(k8s::ApiClient& client, StandInOptions options);
  ~KubeSchedulerStandIn();
  KubeSchedulerStandIn(const KubeSchedulerStandIn&) = delete;
  KubeSchedulerStandIn& operator=(const KubeSchedulerStandIn&) = delete;

  // Watches nodes and pending pods (spec.nodeName == "" and schedulerName ours); schedules one pod at a time
  // like kube-scheduler's scheduling cycle: POST /filter with the pod and all node names, then POST /bind
  // with the chosen node (asynchronously, up to max_binds_in_flight). Unschedulable pods and failed binds are
  // retried with per-pod exponential backoff, and at once when a node is added/updated or a pod is deleted
  // (kube-scheduler requeues on cluster events). Scheduling starts once both caches have synced.
  // Runs until cancelled; then it ends the binds in flight and throws operation_aborted. An unusable
  // extender_url throws std::invalid_argument naming it (check it first with ParseExtenderUrl).
  boost::asio::awaitable<void> Run();

  const std::map<std::string, PodOutcome>& outcomes() const;
  std::function<void(const PodOutcome&)> on_outcome;  // called on every state change (demo live table)

  struct Stats {
    std::size_t filters = 0, binds = 0, bind_failures = 0, filter_errors = 0, unschedulable = 0;
    std::size_t events = 0;             // FailedScheduling events created on the API server
    std::size_t events_suppressed = 0;  // identical to the pod's previous one within 10 s
    std::size_t event_failures = 0;     // the API server refused or could not be reached
    std::size_t max_binds_seen = 0;     // most binds in flight at once
  };
  const Stats& stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- kube-scheduler's side of the extender v1 wire protocol (pure functions).

// Where the extender is: the connection for HttpClient, the path prefix of the verbs ("" or "/prefix") and
// the URL as kube-scheduler prints it. https is not verified (HAMi sets tlsConfig.insecure).
struct ExtenderEndpoint {
  k8s::RestConfig config;
  std::string path_prefix;
  std::string url;  // without a trailing '/'
  std::string VerbUrl(std::string_view verb) const { return url + "/" + std::string(verb); }
  std::string VerbTarget(std::string_view verb) const { return path_prefix + "/" + std::string(verb); }
};
Result<ExtenderEndpoint> ParseExtenderUrl(std::string_view url);

// ExtenderArgs for a nodeCacheCapable extender: {"Pod": pod, "Nodes": null, "NodeNames": [...]}.
std::string FilterArgsWithNodeNames(const boost::json::value& pod,
                                    const std::vector<std::string>& node_names);
// ExtenderArgs for the other kind: {"Pod": pod, "Nodes": {"metadata":{},"items":[...]}, "NodeNames": null}.
std::string FilterArgsWithNodes(const boost::json::value& pod, const std::vector<boost::json::value>& nodes);

// ExtenderFilterResult as Go's decoder reads it (keys case-insensitive, null and absent alike).
Result<k8s::ExtenderFilterResult> ParseFilterResult(std::string_view body);

// What kube-scheduler makes of a filter result for the nodes it sent (in `input`).
struct FilterVerdict {
  std::string error;                                // non-empty: the attempt failed
  std::vector<std::string> feasible;                // in the extender's order
  std::map<std::string, std::string> failed_nodes;  // FailedNodes and FailedAndUnresolvableNodes
};
FilterVerdict ReadFilterResult(const k8s::ExtenderFilterResult& result, const std::vector<std::string>& input,
                               bool node_cache_capable);

// HostPriorityList ([{"Host": node, "Score": n}, ...]) as kube-scheduler reads it.
Result<std::vector<std::pair<std::string, std::int64_t>>> ParseHostPriorityList(std::string_view body);
// The feasible node with the highest score in `scores` (a node not scored counts 0; ties: the first).
std::string HighestScored(const std::vector<std::string>& feasible,
                          const std::vector<std::pair<std::string, std::int64_t>>& scores);

// {"PodName","PodNamespace","PodUID","Node"}.
std::string BindingArgsJson(const k8s::ExtenderBindingArgs& args);
// The Error of an ExtenderBindingResult ("" = bound).
Result<std::string> ParseBindingResult(std::string_view body);

// kube-scheduler's FailedScheduling message: "0/<N> nodes are available: <count> <reason>, ...." with
// identical reasons counted and the "<count> <reason>" entries sorted.
std::string UnschedulableMessage(std::size_t node_count, const std::map<std::string, std::string>& failed);

// A core/v1 Warning event FailedScheduling on `pod` from `component`, named <pod>.<hex nanoseconds>.
boost::json::value FailedSchedulingEvent(const boost::json::value& pod, std::string_view message,
                                         std::string_view component,
                                         std::chrono::system_clock::time_point now);

}  // namespace hami::sim
