#pragma once
// The extender's services wired as the extender wires them, over a recording ClusterWriter (FakeWriter) and
// a pod cache the test fills: the fixture of the services' unit tests.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "extender/admission_service.h"
#include "extender/admission_wire.h"
#include "extender/bind_service.h"
#include "extender/filter_service.h"
#include "extender/health_service.h"
#include "extender/leadership.h"
#include "extender/readiness.h"
#include "extender/requeue.h"
#include "extender/ledger_feed.h"
#include "extender/lock_queue.h"
#include "extender/plugin_locks.h"
#include "extender/pod_ledger.h"
#include "extender/preempt_service.h"
#include "extender/reservation_expiry.h"
#include "extender/score_service.h"
#include "k8s/extender.h"
#include "k8s/json_patch.h"
#include "tests/support/builders.h"
#include "tests/support/run_coro.h"
#include "tests/unit/extender/fake_writer.h"

namespace hami::testing {

class ServicesTest : public ::testing::Test {
 protected:
  void AddNode(const std::string& name) {
    NodeView n = testing::NvidiaNode(name, {testing::Gpu(name + "-gpu0", 0, 16000)});
    n.resource_version = "1";
    feed_.UpsertNode(n);
    writer_.nodes[name] = extender::ObjectMeta{"1", n.annotations};
  }
  PodView GpuPod(const std::string& name) {
    PodView p = testing::Pod(name, {testing::GpuCtr("main", 1, 3000, 30)});
    p.resource_version = "7";
    pods_[p.Key()] = p;
    writer_.pods[p.Key()] = p;
    return p;
  }
  // The decision as kube-scheduler hears it (the HTTP adapter's ToFilterResult of the service's outcome).
  k8s::ExtenderFilterResult Filter(const PodView& pod, std::vector<std::string> nodes) {
    k8s::ExtenderArgs args;
    args.pod = pod;
    args.node_names = std::move(nodes);
    FilterOutcome out;
    testing::RunCoro(ioc_, [&]() -> boost::asio::awaitable<void> {
      out = co_await filter_.Filter(args.pod, *args.node_names);
    }());
    return k8s::ToFilterResult(out, args);
  }
  std::string Bind(const PodView& pod, const std::string& node) {
    return BindAs(pod.ns, pod.name, pod.uid, node);
  }
  std::string BindAs(const std::string& ns, const std::string& name, const std::string& uid,
                     const std::string& node) {
    // Built outside the coroutine: GCC 12 destroys a braced temporary twice when a co_await shares its
    // full-expression.
    const extender::BindRequest request{ns, name, uid, node};
    std::string error;
    testing::RunCoro(ioc_,
                     [&]() -> boost::asio::awaitable<void> { error = co_await binder_.Bind(request); }());
    return error;
  }

  boost::asio::io_context ioc_;
  Backends backends_ = testing::BuiltinBackends();
  FixedClock clock_{TimePoint(std::chrono::seconds(1700000000))};
  testing::FakeWriter writer_;
  extender::LedgerFeed feed_{backends_, writer_};
  extender::PodLedger ledger_{feed_};
  extender::ReservationExpiry expiry_{ledger_, writer_, backends_, clock_, std::chrono::seconds(300)};
  extender::NodeLocker locker_{writer_, clock_, std::chrono::seconds(300)};
  std::map<std::string, PodView> pods_;  // the pod cache
  extender::LockQueue lock_queue_{ioc_.get_executor(), feed_.state(), pods_, locker_,
                                  std::chrono::milliseconds(0)};
  extender::PluginLocks plugin_locks_{ioc_.get_executor(), feed_.state(), ledger_, pods_, locker_, clock_,
                                      std::chrono::seconds(300)};
  extender::Requeue requeue_{feed_.state(), pods_, writer_, clock_,
                             extender::RequeueOptions{.qps = 1000,
                                                      .scheduler_name = "hami-scheduler",
                                                      .policies = extender::FilterOptions{}.policies,
                                                      .settle = std::chrono::milliseconds(0),
                                                      .renudge_after = std::chrono::seconds(30)}};
  extender::BindService binder_{
      feed_.state(),
      ledger_,
      pods_,
      lock_queue_,
      plugin_locks_,
      locker_,
      writer_,
      clock_,
      extender::BindOptions{std::chrono::milliseconds(0), std::chrono::seconds(300)},
      requeue_};
  // Ready from the start: no cache to wait for, and the first health pass (over no node) has run.
  extender::Leadership leadership_{extender::LeadershipOptions{}};
  extender::HealthService health_{backends_, writer_, clock_, std::chrono::seconds(60)};
  std::map<std::string, NodeView> no_nodes_;
  extender::Readiness readiness_{leadership_};
  bool ready_ = [this] {
    readiness_.RequireHealthPass(health_);
    testing::RunCoro(ioc_, health_.Pass(no_nodes_, feed_.state()));
    return readiness_.ready();
  }();
  extender::ScoreService scores_{feed_.state(), ledger_, pods_, clock_, readiness_,
                                 extender::FilterOptions{}.policies};
  extender::FilterService filter_{
      feed_.state(), ledger_, binder_, pods_, writer_, clock_, extender::FilterOptions{}, 0, readiness_,
      requeue_,
      scores_};
  extender::AdmissionService admission_{backends_, feed_.state(), AdmissionOptions{"hami-scheduler", true}};
  std::map<std::string, DisruptionBudgetView> budgets_;  // the PodDisruptionBudget cache
  bool budgets_synced_ = true;
  extender::PreemptService preempt_{feed_.state(), pods_, budgets_, [this] { return budgets_synced_; },
                                    readiness_,
                                    extender::PreemptOptions{.policies = extender::FilterOptions{}.policies,
                                                             .scheduler_name = "hami-scheduler"}};
};

// The pod as the API server stores it after applying the webhook's answer (the original when none).
struct Admitted {
  k8s::AdmissionAnswer answer;
  boost::json::value pod;
};
inline Admitted Admit(extender::AdmissionService& service, std::string_view pod_json) {
  k8s::AdmissionRequest request;
  request.api_version = "admission.k8s.io/v1beta1";
  request.uid = "u";
  request.operation = "CREATE";
  request.kind = "Pod";
  request.ns = "team";
  request.object = boost::json::parse(pod_json);
  Admitted out{extender::ReviewAdmission(service, request), request.object};
  if (auto applied = k8s::ApplyJsonPatch(out.pod, out.answer.patch); !applied)
    ADD_FAILURE() << applied.error().message;
  return out;
}

}  // namespace hami::testing
