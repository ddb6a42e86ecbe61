#include "extender/watch_routes.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "core/keys.h"
#include "k8s/objects.h"

namespace hami::extender {
namespace asio = boost::asio;

namespace {

k8s::Reflector::Options At(k8s::Reflector::Options o, std::string path) {
  o.path = std::move(path);
  return o;
}

k8s::Reflector::Options NodeWatch(const CacheOptions& options) {
  k8s::Reflector::Options o = At(options.reflector, "/api/v1/nodes");
  for (const auto& [key, value] : options.node_label_selector)
    o.label_selector += fmt::format("{}{}={}", o.label_selector.empty() ? "" : ",", key, value);
  return o;
}

k8s::Reflector::Options LeaseWatch(const CacheOptions& options) {
  k8s::Reflector::Options o = At(
      options.reflector,
      fmt::format("/apis/coordination.k8s.io/v1/namespaces/{}/leases", options.lease_namespace));
  o.field_selector = "metadata.name=" + options.lease_name;
  // A watch that backs off longer than the Lease lasts would end a term kube-scheduler still holds.
  o.backoff_max = std::min<std::chrono::milliseconds>(o.backoff_max, std::chrono::seconds(2));
  return o;
}

}  // namespace

Caches::Caches(k8s::ApiClient& client, const CacheOptions& options)
    : nodes(client, NodeWatch(options), k8s::NodeFromJson),
      pods(client, At(options.reflector, "/api/v1/pods"), k8s::PodFromJson),
      quotas(client, At(options.reflector, "/api/v1/resourcequotas"), k8s::ResourceQuotaFromJson),
      budgets(client, At(options.reflector, "/apis/policy/v1/poddisruptionbudgets"),
              k8s::DisruptionBudgetFromJson),
      lease(options.watch_lease
                ? std::make_unique<k8s::Informer<LeaseView>>(client, LeaseWatch(options), k8s::LeaseFromJson)
                : nullptr) {}

asio::awaitable<void> Caches::Run() {
  using namespace asio::experimental::awaitable_operators;
  if (lease) {
    co_await (nodes.Run() && pods.Run() && quotas.Run() && budgets.Run() && lease->Run());
  } else {
    co_await (nodes.Run() && pods.Run() && quotas.Run() && budgets.Run());
  }
}

void WatchRoutes::Attach(Caches& caches) {
  const auto synced = [this] { t_.readiness.changed().Notify(); };
  caches.nodes.SetHandlers({
      .on_add = [this](const NodeView& n) { OnNode(n); },
      .on_update =
          [this](const NodeView& old_node, const NodeView& n) {
            if (old_node.uid != n.uid) OnNodeDeleted(old_node);
            OnNode(n);
          },
      .on_delete = [this](const NodeView& n) { OnNodeDeleted(n); },
      .on_synced = synced,
  });
  caches.pods.SetHandlers({
      .on_add =
          [this](const PodView& p) {
            OnPod(p);
            t_.requeue.Poke();  // an allocation read back smaller, a reservation released
          },
      .on_update =
          [this](const PodView& old_pod, const PodView& p) {
            if (old_pod.uid != p.uid) OnPodDeleted(old_pod);
            OnPod(p);
            t_.requeue.Poke();
          },
      .on_delete = [this](const PodView& p) { OnPodDeleted(p); },
      .on_synced = synced,
  });
  QuotaBook& quotas = t_.feed.state().quotas();
  Requeue& requeue = t_.requeue;
  caches.quotas.SetHandlers({
      .on_add =
          [&quotas, &requeue](const ResourceQuotaView& q) {
            quotas.UpsertQuota(q);
            requeue.QuotaChanged(q.ns);
          },
      .on_update =
          [&quotas, &requeue](const ResourceQuotaView& old_quota, const ResourceQuotaView& q) {
            quotas.UpsertQuota(q);
            // The quota controller rewrites status.used on every pod change: only new limits matter here.
            if (old_quota.hard != q.hard) requeue.QuotaChanged(q.ns);
          },
      .on_delete =
          [&quotas, &requeue](const ResourceQuotaView& q) {
            quotas.RemoveQuota(q.ns, q.name);
            requeue.QuotaChanged(q.ns);
          },
      .on_synced = synced,
  });
  if (caches.lease) {
    Leadership& leadership = t_.leadership;
    caches.lease->SetHandlers({
        .on_add = [&leadership](const LeaseView& l) { leadership.Observe(&l); },
        .on_update = [&leadership](const LeaseView&, const LeaseView& l) { leadership.Observe(&l); },
        .on_delete = [&leadership](const LeaseView&) { leadership.Observe(nullptr); },
        .on_synced = synced,
    });
  }
}

void WatchRoutes::OnNode(const NodeView& node) {
  t_.feed.UpsertNode(node);
  t_.health.ApplyMask(node.name, t_.feed.state());
  t_.plugin_locks.OnNodeSeen(node);  // locks the node shows released are forgotten
  t_.lock_queue.Wake(node.name);     // the head of each lock queue looks again
  t_.requeue.NodeSeen(node);         // binds that timed out on its lock are tried again
  t_.requeue.Poke();                 // devices added or usable again
}

void WatchRoutes::OnNodeDeleted(const NodeView& node) {
  t_.feed.RemoveNode(node.name);
  t_.health.Forget(node.name);  // a node re-created under the same name starts clean
  t_.plugin_locks.OnNodeDeleted(node.name);
  t_.lock_queue.Wake(node.name);
}

void WatchRoutes::OnPod(const PodView& pod) {
  const std::string uid = pod.UidOrKey();
  t_.feed.TrackWaiting(pod, pod.scheduler_name == t_.scheduler_name);
  t_.preempt.OnPod(pod);
  if (pod.Finished()) {
    PodGone(uid);
    return;
  }
  if (!pod.node_name.empty()) {
    t_.scores.Forget(uid);
    t_.ledger.ShownBound(uid);
    t_.requeue.Forget(uid);
  } else if (const Reservation* r = t_.ledger.FindReservation(uid);
             r != nullptr && !t_.ledger.Binding(r->key, uid) && r->AbandonedBy(pod)) {
    // kube-scheduler ended the attempt our filter reserved for (it reported the pod unschedulable since, or
    // nominated another node): the devices go back now, not after --reservation-timeout.
    spdlog::info("pod {}: kube-scheduler {}; its reservation on node {} is released", pod.Key(),
                 pod.nominated_node_name.empty() || pod.nominated_node_name == r->node
                     ? "reported it unschedulable after our filter"
                     : "nominated node " + pod.nominated_node_name,
                 r->node);
    t_.ledger.Release(uid);
  }
  // A pod without hami.io/vgpu-node holds nothing new (our reservation, if any, is written by its Binding).
  // A bound one whose annotations were removed keeps what it held, and a block it caused (fail closed).
  if (!pod.annotations.contains(keys::kAssignedNode)) {
    if (pod.node_name.empty()) t_.feed.ClearUnreadable(uid);
    return;
  }
  if (t_.ledger.reserved(uid)) {
    // Our filter decided for this pod and the Binding writes the decision: until the pod shows bound,
    // annotations it carries are an earlier decision's.
    if (pod.node_name.empty()) return;
    t_.ledger.DropReservation(uid);
  }
  t_.feed.RecordAllocation(pod);
}

void WatchRoutes::OnPodDeleted(const PodView& pod) {
  const std::string uid = pod.UidOrKey();
  t_.feed.StopWaiting(uid);
  PodGone(uid);
}

void WatchRoutes::PodGone(const std::string& uid) {
  t_.preempt.Forget(uid);
  t_.scores.Forget(uid);
  t_.ledger.Gone(uid);
  t_.plugin_locks.ReleaseLeftover(uid);
  t_.lock_queue.WakeAll();  // it may own a lock someone waits for
  t_.requeue.Forget(uid);
  t_.requeue.Poke();  // what it held is free for the pods our filter refused
}

}  // namespace hami::extender
