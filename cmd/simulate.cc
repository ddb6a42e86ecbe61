// `hami-scheduler simulate`: places pods offline against a cluster snapshot with the real decision engine.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <ostream>

#include "cmd/app.h"
#include "cmd/subcommand_flags.h"
#include "cmd/text_table.h"
#include "config/flags.h"
#include "core/codec/stamps.h"
#include "core/explain.h"
#include "core/health.h"
#include "core/names.h"
#include "core/preemption.h"
#include "core/scheduler.h"
#include "core/strings.h"
#include "extender/explain_wire.h"
#include "k8s/files.h"
#include "k8s/http_client.h"
#include "k8s/logging.h"
#include "k8s/objects.h"
#include "sim/scheduler/kube_scheduler.h"

namespace hami::cmd {
namespace json = boost::json;
namespace asio = boost::asio;
namespace {

constexpr std::string_view kSimulateUsage =
    R"(Usage: hami-scheduler simulate --cluster FILE [--pods FILE] [-o json|table]
                                [--now RFC3339] [config flags]

Places pods on a cluster snapshot with the same decision engine the extender uses.
  --cluster FILE   what `kubectl get nodes,pods,resourcequotas,pdb -A -o json` (or -o yaml) prints. Pods
                   that carry hami.io/vgpu-node count as usage; pods with no node are placed, in file order.
  --pods FILE      more pods to place after those (a List, or multi-document YAML).
  -o, --output     json (default) or table.
  --now TIME       decision time written into annotations (default: now), for reproducible output. Node
                   health is judged at this time too, as serve's health pass does (--handshake-timeout):
                   a vendor whose handshake request expired unanswered with 0 allocatable is withheld.
Config flags (--config, --device-config-file, --gpu-scheduler-policy, --node-scheduler-policy, ...) apply.
With --filter-mode all-fitting each pod goes to the node /prioritize scores best (kube-scheduler's own
plugins are not modelled) and its result shows every fitting node's score.
Unschedulable pods are results, with the pods whose eviction would make room for them (on the node
kube-scheduler's preemption would pick; none for a pod whose preemptionPolicy is Never); malformed input
exits with status 2 and names the object and field.
)";

constexpr std::string_view kExplainUsage =
    R"(Usage: hami-scheduler explain NAMESPACE/POD --cluster FILE [--pods FILE] [-o table|json]
                               [--now RFC3339] [config flags]
       hami-scheduler explain NAMESPACE/POD --server URL [-o table|json]

Why a pod is pending, down to the card that came closest on each node (and by how much), with what would
help. With --cluster, on a snapshot: the pods before it are placed as `simulate` places them (the flags are
simulate's). With --server, as the running scheduler sees it now: URL is its metrics listener
(--metrics-bind-address, e.g. http://127.0.0.1:9395), which answers GET /api/explain/<namespace>/<pod>.
-o defaults to table. A pod that is not pending is said so; one that is not there is an error (status 2).
)";

struct SimulateArgs {
  std::string explain;  // explain: the pod ("ns/name")
  std::string server;   // explain: the running scheduler's metrics listener
  std::string cluster;
  std::string pods;
  std::string output = "json";
  std::optional<TimePoint> now;
  std::vector<std::string> config_args{"hami-scheduler simulate"};
  bool help = false;
};

// Its own flags; every other argument is a configuration flag (config/flags.h reads them, Go forms too).
// `explain`: the first argument names the pod.
Result<SimulateArgs> ParseArgs(std::vector<std::string> args, bool explain) {
  SimulateArgs a;
  if (explain) {
    a.output = "table";
    a.config_args = {"hami-scheduler explain"};
    if (!args.empty() && !args.front().starts_with("-")) {
      a.explain = args.front();
      args.erase(args.begin());
      const auto slash = a.explain.find('/');
      if (slash == std::string::npos)
        return Error{fmt::format("{}: expected NAMESPACE/POD", Quoted(a.explain))};
      if (auto ok = ValidateName("the namespace", a.explain.substr(0, slash), NameKind::kNamespace); !ok)
        return ok.error();
      if (auto ok = ValidateName("the pod name", a.explain.substr(slash + 1), NameKind::kPod); !ok)
        return ok.error();
    }
  }
  std::vector<std::string> value_flags{"cluster", "pods", "o,output", "now"};
  if (explain) value_flags.push_back("server");
  const SubcommandFlags declared(explain ? "hami-scheduler explain" : "hami-scheduler simulate", value_flags);
  auto given = declared.Parse(args);
  if (!given) return given.error();
  a.help = given->help;
  a.config_args.insert(a.config_args.end(), given->undeclared.begin(), given->undeclared.end());
  std::vector<std::string> problems;
  for (const auto& [name, value] : given->flags) {
    if (name == "server") {
      a.server = value;
    } else if (name == "cluster") {
      a.cluster = value;
    } else if (name == "pods") {
      a.pods = value;
    } else if (name == "output") {
      a.output = value;
      if (a.output != "json" && a.output != "table") {
        problems.push_back(fmt::format("--output: '{}' is not json or table", a.output));
      }
    } else {  // now
      auto parsed = codec::ParseRfc3339(value);
      if (!parsed) {
        problems.push_back(fmt::format("--now: {}", parsed.error().message));
      } else {
        a.now = *parsed;
      }
    }
  }
  if (!a.server.empty() && !a.cluster.empty())
    problems.push_back("--server and --cluster exclude each other");
  if (a.cluster.empty() && a.server.empty() && !a.help)
    problems.push_back(explain ? "--cluster FILE or --server URL is required" : "--cluster FILE is required");
  if (explain && a.explain.empty() && !a.help)
    problems.push_back("the pod to explain (NAMESPACE/POD) comes first");
  if (!problems.empty()) return Error{Join(problems, "; ")};
  return a;
}

Result<void> Load(const std::string& path, k8s::ObjectSet& into) {
  auto text = k8s::ReadInput(path);
  if (!text) return text.error();
  const std::string source = path == "-" ? "<stdin>" : path;
  auto docs = k8s::ParseDocuments(*text, source);
  if (!docs) return docs.error();
  for (const auto& d : *docs) {
    if (auto ok = k8s::CollectObjects(d, source, into); !ok) return ok;
  }
  return {};
}

// Where preemption would make room for a pod that fits nowhere, and which pods it would evict there.
struct Preemption {
  std::string node;  // "" when no eviction helps
  VictimChoice choice;
  std::string why_none;
};

struct PodResult {
  const PodView* pod;
  FilterOutcome outcome;
  std::optional<Preemption> preemption;  // unschedulable pods only
  std::vector<std::pair<std::string, int>> scores;  // all-fitting mode: what /prioritize answers
};

// The snapshot's pods by "ns/name", and its budgets, as /preempt reads the caches.
struct Snapshot {
  std::map<std::string, const PodView*> pods;
  std::span<const DisruptionBudgetView> budgets;
};

Preemption AdvisePreemption(const PodView& pod, const FilterOutcome& outcome, const ClusterState& state,
                            const SchedulerOptions& policies, const Snapshot& snapshot) {
  Preemption out;
  if (pod.never_preempts) {
    out.why_none = "its preemptionPolicy is Never";
    return out;
  }
  auto requests = CollectRequests(pod, state.backends());
  auto ctx = DecisionContext(pod, state, policies);
  if (!requests || !ctx) return out;  // an error outcome says why already
  VictimChooser chooser(state);
  std::map<std::string, VictimChoice> choices;
  const auto find = [&](const std::string& key) {
    auto it = snapshot.pods.find(key);
    return it == snapshot.pods.end() ? nullptr : it->second;
  };
  for (const auto& [node, reason] : outcome.failed_nodes) {
    const NodeEntry* entry = state.FindNode(node);
    if (entry == nullptr || outcome.unresolvable.contains(node)) continue;  // no eviction lifts the refusal
    VictimChoice choice = chooser.ChooseOn(pod, *ctx, *requests, *entry, {}, find, snapshot.budgets);
    if (choice.helps && !choice.victims.empty()) choices.emplace(node, std::move(choice));
  }
  const std::string* best = PickPreemptionNode(choices);
  if (best == nullptr) {
    out.why_none = "no eviction of pods of lower priority makes room on any node";
    return out;
  }
  out.node = *best;
  out.choice = std::move(choices.at(*best));
  return out;
}

std::vector<std::string> VictimNames(const Preemption& p) {
  std::vector<std::string> names;
  for (const PodView* v : p.choice.victims) names.push_back(v->Key());
  return names;
}

std::string_view OutcomeName(FilterOutcome::Kind k) {
  switch (k) {
    case FilterOutcome::Kind::kPassThrough:
      return "no-device-request";
    case FilterOutcome::Kind::kScheduled:
      return "scheduled";
    case FilterOutcome::Kind::kFitting:
      return "fitting";
    case FilterOutcome::Kind::kUnschedulable:
      return "unschedulable";
    case FilterOutcome::Kind::kError:
      return "error";
  }
  return "error";
}

json::array DevicesJson(const ClusterState& state) {
  json::array out;
  for (const auto& name : state.NodeNames()) {
    const NodeEntry* n = state.FindNode(name);
    for (std::size_t i = 0; i < n->devices.size(); ++i) {
      const DeviceInfo& d = n->devices[i];
      const DeviceUsage& u = n->usage[i];
      out.push_back(json::object{{"node", name},
                                 {"vendor", d.vendor},
                                 {"id", d.id},
                                 {"count", d.count},
                                 {"used", u.used},
                                 {"devmem", d.devmem.value()},
                                 {"usedmem", u.mem.value()},
                                 {"devcore", d.devcore.value()},
                                 {"usedcores", u.cores.value()},
                                 {"health", d.health}});
    }
  }
  return out;
}

void PrintTable(const std::vector<PodResult>& results, const ClusterState& state, std::ostream& out) {
  TextTable pods({"POD", "RESULT", "NODE", "DEVICES / REASON"});
  for (const auto& r : results) {
    std::string detail;
    if (r.outcome.kind == FilterOutcome::Kind::kScheduled) {
      for (const auto& [vendor, containers] : r.outcome.devices) {
        for (std::size_t c = 0; c < containers.size(); ++c) {
          for (const auto& d : containers[c]) {
            detail +=
                fmt::format("{}[c{}] {} {}MiB {}%  ", vendor, c, d.uuid, d.mem.value(), d.cores.value());
          }
        }
      }
      if (!r.scores.empty()) {
        std::vector<std::string> scores;
        for (const auto& [node, score] : r.scores) scores.push_back(fmt::format("{}={}", node, score));
        detail += "scores " + Join(scores, " ");
      }
    } else if (r.outcome.kind == FilterOutcome::Kind::kUnschedulable) {
      std::vector<std::string> reasons;
      for (const auto& [node, why] : r.outcome.failed_nodes) reasons.push_back(node + ": " + why);
      detail = Join(reasons, "; ");
      if (r.preemption && !r.preemption->node.empty()) {
        detail += fmt::format("; would preempt on {}: {} ({} PodDisruptionBudget violations)",
                              r.preemption->node, Join(VictimNames(*r.preemption), ", "),
                              r.preemption->choice.pdb_violations);
      } else if (r.preemption) {
        detail += "; no preemption: " + r.preemption->why_none;
      }
    } else if (r.outcome.kind == FilterOutcome::Kind::kError) {
      detail = r.outcome.error;
    } else {
      detail = "asks for no managed device; any node";
    }
    while (!detail.empty() && detail.back() == ' ') detail.pop_back();
    pods.Add({r.pod->Key(), std::string(OutcomeName(r.outcome.kind)),
              r.outcome.node.empty() ? "-" : r.outcome.node, detail});
  }
  out << pods.Render() << "\n" << DeviceUsageTable(state).Render();
}

}  // namespace

namespace {

void PrintExplanation(const PodExplanation& e, const std::string& output, std::ostream& out) {
  if (output == "json") {
    out << extender::ExplanationJson(e) << "\n";
    return;
  }
  out << "pod " << e.pod << "\n";
  if (!e.error.empty()) {
    out << "cannot be read: " << e.error << "\n";
    return;
  }
  out << "requests\n";
  for (const std::string& r : e.requests) out << "  " << r << "\n";
  if (!e.nodes.empty()) {
    TextTable nodes({"NODE", "VERDICT"});
    for (const NodeExplanation& n : e.nodes) nodes.Add({n.node, n.Summary()});
    out << "nodes\n" << nodes.Render("  ");
  }
  out << "what would help\n";
  for (const std::string& h : e.hints) out << "  - " << h << "\n";
}

// GET <server>/api/explain/<pod>: the body of a 200 answer, or why there is none.
Result<std::string> FetchExplanation(const std::string& server, const std::string& pod) {
  auto endpoint = sim::ParseExtenderUrl(server);
  if (!endpoint) return Error{fmt::format("--server: {}", endpoint.error().message)};
  asio::io_context ioc;
  auto http = k8s::HttpClient::Create(ioc.get_executor(), endpoint->config, 1);
  if (!http) return Error{fmt::format("--server {}: {}", endpoint->url, http.error().message)};
  k8s::HttpRequest request;
  request.target = endpoint->path_prefix + "/api/explain/" + pod;
  request.user_agent = "hami-scheduler explain";
  Result<std::string> out = Error{"no answer"};
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto response = co_await (*http)->Send(request, std::chrono::seconds(30));
        if (!response) {
          out = Error{fmt::format("{}/api/explain/{}: {}", endpoint->url, pod, response.error().message)};
        } else if (response->status != 200) {
          out = Error{fmt::format("{}/api/explain/{}: HTTP {}: {}", endpoint->url, pod, response->status,
                                  k8s::EscapeControlChars(response->body))};
        } else {
          out = Ok(response->body);
        }
      },
      asio::detached);
  ioc.run();
  return out;
}

int RunSnapshot(const std::vector<std::string>& args, bool explain, std::ostream& out, std::ostream& err) {
  const std::string prefix = explain ? "hami-scheduler explain: " : "hami-scheduler simulate: ";
  const std::string_view usage = explain ? kExplainUsage : kSimulateUsage;
  auto parsed = ParseArgs(args, explain);
  if (!parsed) {
    err << prefix << parsed.error().message << "\n" << usage;
    return kExitUsage;
  }
  if (parsed->help) {
    out << usage;
    return kExitOk;
  }
  if (!parsed->server.empty()) {
    auto body = FetchExplanation(parsed->server, parsed->explain);
    auto explained = body ? extender::ParseExplanation(*body) : Result<PodExplanation>(body.error());
    if (!explained) {
      err << prefix << explained.error().message << "\n";
      return kExitUsage;
    }
    PrintExplanation(*explained, parsed->output, out);
    return kExitOk;
  }
  auto loaded = config::LoadConfig(parsed->config_args, Vendors());
  if (!loaded) {
    err << prefix << loaded.error().message << "\n";
    return kExitUsage;
  }
  for (const auto& w : loaded->config.warnings) err << "warning: " << w << "\n";
  auto backends = BuildBackends(loaded->config);
  if (!backends) {
    err << prefix << backends.error().message << "\n";
    return kExitUsage;
  }
  k8s::ObjectSet cluster, extra;
  if (auto ok = Load(parsed->cluster, cluster); !ok) {
    err << prefix << ok.error().message << "\n";
    return kExitUsage;
  }
  if (!parsed->pods.empty()) {
    if (auto ok = Load(parsed->pods, extra); !ok) {
      err << prefix << ok.error().message << "\n";
      return kExitUsage;
    }
  }

  const TimePoint now = parsed->now.value_or(std::chrono::system_clock::now());
  ClusterState state(*backends);
  for (const auto& q : cluster.quotas) state.quotas().UpsertQuota(q);
  for (const auto& n : cluster.nodes) {
    state.UpsertNode(n);
    const NodeEntry* entry = state.FindNode(n.name);
    for (std::size_t b = 0; b < entry->discovery_error.size(); ++b) {
      if (!entry->discovery_error[b].empty()) {
        err << fmt::format("warning: node {}: {}: {}\n", n.name, backends->at(b).Vendor(),
                           entry->discovery_error[b]);
      }
    }
    // serve's health pass, once, with nothing remembered: what a serve started at `now` on this snapshot
    // decides before it answers its first filter. Handshake writes are serve's business, not ours.
    NodeHealthRecord fresh;
    for (const NodeHealthStep& step :
         NodeHealthPass(*backends, n, entry, fresh, now, loaded->config.extender.handshake_timeout)) {
      if (!step.withhold) continue;
      state.RemoveVendorDevices(n.name, step.backend);
      err << fmt::format("warning: node {}: {} devices withheld, as serve would: {}\n", n.name,
                         backends->at(step.backend).Vendor(), step.verdict.why);
    }
  }
  std::vector<const PodView*> to_place;
  for (const auto& p : cluster.pods) {
    if (p.Finished()) continue;
    auto allocation = AllocationFromAnnotations(p, *backends);
    if (!allocation) {
      err << prefix << allocation.error().message << "\n";
      return kExitUsage;
    }
    if (*allocation) {
      if ((*allocation)->uid.empty()) (*allocation)->uid = p.Key();
      state.AddPod(std::move(**allocation));
    } else if (p.node_name.empty()) {
      to_place.push_back(&p);
    }
  }
  for (const auto& p : extra.pods) to_place.push_back(&p);

  Scheduler scheduler(state, loaded->config.extender.filter.policies);
  // Candidates: every node, or those matching --node-label-selector (equality, like HAMi's).
  std::vector<std::string> candidates;
  for (const auto& n : cluster.nodes) {
    const bool selected = std::all_of(loaded->config.extender.node_label_selector.begin(),
                                      loaded->config.extender.node_label_selector.end(), [&](const auto& kv) {
                                        auto l = n.labels.find(kv.first);
                                        return l != n.labels.end() && l->second == kv.second;
                                      });
    if (selected) candidates.push_back(n.name);
  }
  std::sort(candidates.begin(), candidates.end());
  // The pods to place wait for a decision as they would in kube-scheduler's queue (the burst binpack's
  // decision reads). Each placed pod counts as set up before the next is decided: with nothing in flight
  // but what the snapshot holds, the node policy alone decides, as a serve whose device plugins keep up.
  for (const PodView* p : to_place) {
    if (auto requests = CollectRequests(*p, *backends); requests)
      state.SetWaiting(p->UidOrKey(), requests->BackendsAsked());
  }
  Snapshot snapshot{{}, cluster.budgets};
  for (const PodView& p : cluster.pods) snapshot.pods.emplace(p.Key(), &p);
  std::vector<PodResult> results;
  for (const PodView* p : to_place) {
    if (explain && p->Key() == parsed->explain) {
      PrintExplanation(ExplainPod(state, scheduler.options(), *p, candidates), parsed->output, out);
      return kExitOk;
    }
    const auto requests = CollectRequests(*p, *backends);
    PodResult r{p, scheduler.Filter(*p, requests, candidates, now), std::nullopt, {}};
    if (r.outcome.kind == FilterOutcome::Kind::kFitting) {
      // kube-scheduler chooses by the sum of its plugins' scores and ours; with none of its plugins here,
      // that is our best node (ties: the first), where the pod is placed as /bind places it.
      Scheduler::Scores scored = scheduler.Prioritize(*p, requests, r.outcome.fitting, {});
      r.scores = std::move(scored.scores);
      r.outcome = scheduler.PlaceOn(*p, requests, scored.best, now);
    }
    const std::string uid = p->UidOrKey();
    if (r.outcome.kind == FilterOutcome::Kind::kScheduled) {
      scheduler.Reserve(*p, r.outcome, Scheduler::Hold::kSetUp);
      state.ClearWaiting(uid);
    } else if (r.outcome.kind == FilterOutcome::Kind::kUnschedulable) {
      state.SetUnplaceable(uid);
      r.preemption = AdvisePreemption(*p, r.outcome, state, scheduler.options(), snapshot);
    }
    results.push_back(std::move(r));
  }

  if (explain) {  // not among the pods to place
    const auto it = snapshot.pods.find(parsed->explain);
    if (it == snapshot.pods.end()) {
      err << prefix << "pod " << parsed->explain << " is not in the snapshot\n";
      return kExitUsage;
    }
    const PodView& pod = *it->second;
    out << "pod " << parsed->explain << " is not pending: "
        << (pod.Finished()                ? std::string("it has finished")
            : !pod.node_name.empty() ? "it is bound to node " + pod.node_name
                                     : std::string("it carries an allocation already, counted as usage"))
        << "\n";
    return kExitOk;
  }
  if (parsed->output == "table") {
    PrintTable(results, state, out);
    return kExitOk;
  }
  json::array results_json;
  for (const auto& r : results) {
    json::object annotations, failed;
    for (const auto& [k, v] : r.outcome.annotations) annotations[k] = v;
    for (const auto& [k, v] : r.outcome.failed_nodes) failed[k] = v;
    json::object o{{"pod", r.pod->Key()},
                   {"outcome", OutcomeName(r.outcome.kind)},
                   {"node", r.outcome.node.empty() ? json::value(nullptr) : json::value(r.outcome.node)},
                   {"annotations", std::move(annotations)},
                   {"failedNodes", std::move(failed)}};
    if (!r.outcome.error.empty()) o["error"] = r.outcome.error;
    if (!r.scores.empty()) {
      json::object scores;
      for (const auto& [node, score] : r.scores) scores[node] = score;
      o["scores"] = std::move(scores);
    }
    if (r.preemption) {
      json::array victims;
      for (const std::string& name : VictimNames(*r.preemption)) victims.emplace_back(name);
      o["preemption"] =
          r.preemption->node.empty()
              ? json::object{{"node", nullptr}, {"reason", r.preemption->why_none}}
              : json::object{{"node", r.preemption->node},
                             {"victims", std::move(victims)},
                             {"pdbViolations", r.preemption->choice.pdb_violations}};
    }
    results_json.push_back(std::move(o));
  }
  out << json::serialize(json::object{{"results", std::move(results_json)}, {"devices", DevicesJson(state)}})
      << "\n";
  return kExitOk;
}

}  // namespace

int Simulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return RunSnapshot(args, false, out, err);
}

int Explain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return RunSnapshot(args, true, out, err);
}

}  // namespace hami::cmd
