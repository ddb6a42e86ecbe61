#include "extender/housekeeping.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <optional>
#include <utility>
#include <vector>

namespace hami::extender {
namespace asio = boost::asio;
using std::chrono::steady_clock;

asio::awaitable<void> Housekeeping::Run() {
  while (!p_.readiness.synced())
    co_await p_.readiness.changed().WaitUntil(steady_clock::now() + std::chrono::hours(1));
  const LeadershipOptions& election = p_.leadership.options();
  bool was_leader = !election.enabled;
  for (;;) {
    const bool leader = p_.leadership.leader();
    // The elector logs its own turns (acquire mode); a followed Lease's are logged here.
    if (leader != was_leader && election.mode == LeaderElectMode::kFollow)
      spdlog::info("leader election: {}",
                   leader ? "leading (the Lease names our host)" : p_.leadership.Describe());
    was_leader = leader;
    if (leader) {
      // The labels first: the chart's Service (the webhook's way in) selects the leader's pod by them.
      if (election.enabled) co_await LabelSchedulerPods();
      co_await HealthPass();
      co_await Sweep();
    }
    // Becoming the leader starts a round at once.
    co_await p_.leadership.changed().WaitUntil(steady_clock::now() + options_.interval);
    co_await k8s::ThrowIfCancelled();
  }
}

asio::awaitable<void> Housekeeping::HealthPass() {
  co_await p_.health.Pass(p_.caches.nodes.views(), p_.feed.state());
  p_.requeue.Poke();  // devices usable again
}

asio::awaitable<void> Housekeeping::Sweep() {
  // One sweep at a time (a test's call may meet the loop's): each decides from what the last one left.
  while (sweeping_) co_await sweep_done_.WaitUntil(steady_clock::now() + std::chrono::hours(1));
  sweeping_ = true;
  struct Done {
    Housekeeping* h;
    ~Done() {
      h->sweeping_ = false;
      h->sweep_done_.Notify();
    }
  } done{this};
  const auto& pods = p_.caches.pods.views();
  const auto due = p_.expiry.Expire(pods);
  p_.requeue.Poke();  // the expired reservations' devices are free: refused pods may take them now
  // Ledger entries the annotations no longer back (removed by someone, or by an expiry that raced a filter).
  for (const auto& uid :
       p_.feed.Orphans(pods, [this](const std::string& uid) { return p_.ledger.reserved(uid); })) {
    spdlog::info("ledger: pod uid {} no longer carries an allocation: released", uid);
    p_.ledger.Release(uid);
  }
  co_await p_.plugin_locks.ReleaseAbandoned(p_.caches.nodes.views());
  co_await p_.expiry.Clear(due);
}

asio::awaitable<void> Housekeeping::LabelSchedulerPods() {
  if (options_.pod_name.empty() || options_.pod_namespace.empty()) co_return;
  constexpr std::string_view kRole = "hami.io/scheduler-role";
  std::vector<std::pair<std::string, std::string>> changes;  // pod, role
  const std::string prefix = options_.pod_namespace + "/";   // the cache is keyed "ns/name", sorted
  const auto& pods = p_.caches.pods.views();
  // Only the pods of our own release (its app.kubernetes.io/instance, when our pod has one): two releases in
  // one namespace, or HAMi's chart beside ours while switching, would otherwise relabel each other's pods.
  constexpr std::string_view kInstance = "app.kubernetes.io/instance";
  std::optional<std::string> instance;
  if (auto self = pods.find(prefix + options_.pod_name); self != pods.end()) {
    if (auto i = self->second.labels.find(std::string(kInstance)); i != self->second.labels.end())
      instance = i->second;
  }
  for (auto it = pods.lower_bound(prefix); it != pods.end() && it->first.starts_with(prefix); ++it) {
    const PodView& pod = it->second;
    auto component = pod.labels.find("app.kubernetes.io/component");
    if (component == pod.labels.end() || component->second != "hami-scheduler") continue;
    if (instance) {
      auto i = pod.labels.find(std::string(kInstance));
      if (i == pod.labels.end() || i->second != *instance) continue;
    }
    const std::string role = pod.name == options_.pod_name ? "leader" : "follower";
    auto current = pod.labels.find(std::string(kRole));
    if (current == pod.labels.end() || current->second != role) changes.emplace_back(pod.name, role);
  }
  for (const auto& [name, role] : changes) {
    const boost::json::value patch = {{"metadata", {{"labels", {{kRole, role}}}}}};
    auto r = co_await p_.writer.PatchPod(options_.pod_namespace, name, patch, Budget::kBackground);
    if (!r)
      spdlog::warn("leader: labelling pod {}/{} {}={}: {}", options_.pod_namespace, name, kRole, role,
                   r.error().message);
  }
}

}  // namespace hami::extender
