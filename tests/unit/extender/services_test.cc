// The extender's services through the ClusterWriter port (a recording fake), without HTTP: each one's
// effects on the cluster, request by request.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "core/base64.h"
#include "core/keys.h"
#include "extender/admission_service.h"
#include "extender/admission_wire.h"
#include "extender/bind_service.h"
#include "extender/filter_service.h"
#include "extender/health_service.h"
#include "extender/leadership.h"
#include "extender/ledger_feed.h"
#include "extender/reservation_expiry.h"
#include "k8s/objects.h"
#include "tests/support/builders.h"
#include "tests/support/run_coro.h"
#include "tests/unit/extender/fake_writer.h"
#include "tests/unit/extender/services_fixture.h"

namespace hami {
namespace {

namespace asio = boost::asio;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCoro;
using testing::Admit;
using testing::Admitted;
using testing::ServicesTest;
using ::testing::StartsWith;


TEST_F(ServicesTest, FilterReservesInMemoryAndWritesOnlyAnEvent) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  const auto result = Filter(pod, {"n1"});
  EXPECT_EQ(result.error, "");
  EXPECT_EQ(result.node_names, std::vector<std::string>{"n1"});
  EXPECT_TRUE(ledger_.reserved(pod.uid));
  ASSERT_NE(feed_.state().FindPod(pod.uid), nullptr);
  EXPECT_THAT(writer_.Whats(), ElementsAre("event Normal FilteringSucceed p"));
}

// The pods waiting for a decision (the burst binpack's decision reads): ours, not bound, asking for devices;
// placed ones and ones no node fits are not counted; a released reservation waits again.
TEST_F(ServicesTest, PodsOfOursWaitingForADecisionAreCountedUntilPlacedOrGone) {
  AddNode("n1");
  PodView a = GpuPod("a");
  a.scheduler_name = "hami-scheduler";
  feed_.TrackWaiting(a, true);
  PodView theirs = GpuPod("theirs");
  feed_.TrackWaiting(theirs, false);  // another scheduler's
  PodView cpu = testing::Pod("cpu", {testing::Ctr("main", {{"cpu", "1"}})});
  feed_.TrackWaiting(cpu, true);  // asks for no device
  PodView bad = testing::Pod("bad", {testing::Ctr("main", {{"nvidia.com/gpu", "x"}})});
  feed_.TrackWaiting(bad, true);  // requests that cannot be read: its filter is an error
  EXPECT_EQ(feed_.state().WaitingFor(testing::BackendIndex(backends_, "nvidia")), 1u);
  EXPECT_EQ(Filter(a, {"n1"}).error, "");
  EXPECT_EQ(feed_.state().WaitingFor(testing::BackendIndex(backends_, "nvidia")), 0u);  // placed
  EXPECT_EQ(feed_.state().WaitingPods(), 1u);  // still not bound
  feed_.Forget(a.uid);                          // the reservation went (expired, a failed bind)
  EXPECT_EQ(feed_.state().WaitingFor(testing::BackendIndex(backends_, "nvidia")), 1u);
  PodView big = testing::Pod("big", {testing::GpuCtr("main", 1, 90000, 30)});
  pods_[big.Key()] = big;
  writer_.pods[big.Key()] = big;
  feed_.TrackWaiting(big, true);
  EXPECT_EQ(feed_.state().WaitingFor(testing::BackendIndex(backends_, "nvidia")), 2u);
  EXPECT_THAT(Filter(big, {"n1"}).failed_and_unresolvable, ::testing::Contains(::testing::Key("n1")));
  EXPECT_EQ(feed_.state().WaitingFor(testing::BackendIndex(backends_, "nvidia")), 1u);  // no node fits it: not part of a burst
  a.node_name = "n1";
  feed_.TrackWaiting(a, true);  // bound
  EXPECT_EQ(feed_.state().WaitingFor(testing::BackendIndex(backends_, "nvidia")), 0u);
  PodView ending = big;
  ending.terminating = true;
  feed_.TrackWaiting(ending, true);
  feed_.StopWaiting(theirs.uid);
  EXPECT_EQ(feed_.state().WaitingPods(), 0u);
}

TEST_F(ServicesTest, BindTakesTheLockWithOneCompareAndSwapAndTheBindingCarriesTheDecision) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  Filter(pod, {"n1"});
  writer_.calls.clear();
  EXPECT_EQ(Bind(pod, "n1"), "");
  EXPECT_THAT(writer_.Whats(),
              ElementsAre("patch node n1", "bind default/p n1", "event Normal BindingSucceed p"));
  // The lock patch was a compare-and-swap on the cached resourceVersion: no read first.
  EXPECT_EQ(writer_.calls[0].patch.at("metadata").at("resourceVersion"), "1");
  ASSERT_EQ(writer_.bindings.size(), 1u);
  const auto& a = writer_.bindings[0].annotations;
  EXPECT_EQ(a.at(std::string(keys::kAssignedNode)), "n1");
  EXPECT_EQ(a.at(std::string(keys::kBindPhase)), keys::kBindPhaseAllocating);
  EXPECT_TRUE(a.contains("hami.io/vgpu-devices-to-allocate"));
  // The lock stays for the device plugin to release.
  EXPECT_TRUE(writer_.nodes["n1"].annotations.contains("hami.io/mutex.lock"));
}

TEST_F(ServicesTest, AFailedBindingReleasesTheLockAndSaysWhy) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  Filter(pod, {"n1"});
  writer_.fail_next_bind.push_back(extender::ApiError{extender::ApiErrorKind::kOther, 422, "Invalid", "no"});
  EXPECT_THAT(Bind(pod, "n1"), StartsWith("could not bind pod default/p to node n1"));
  EXPECT_FALSE(writer_.nodes["n1"].annotations.contains("hami.io/mutex.lock"));
}

TEST_F(ServicesTest, ABindingWhoseAnswerWasLostIsReadBackAndKeepsTheLock) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  Filter(pod, {"n1"});
  writer_.fail_next_bind.push_back(extender::ApiError{extender::ApiErrorKind::kTransport, 0, "", "reset"});
  // ... but the API server applied it.
  writer_.pods[pod.Key()].node_name = "n1";
  writer_.pods[pod.Key()].annotations[std::string(keys::kBindPhase)] =
      std::string(keys::kBindPhaseAllocating);
  EXPECT_EQ(Bind(pod, "n1"), "");
  EXPECT_TRUE(writer_.nodes["n1"].annotations.contains("hami.io/mutex.lock"));
}

TEST_F(ServicesTest, ABindOfAPodWithoutReservationIsRefusedWithoutARequest) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  EXPECT_THAT(Bind(pod, "n1"), HasSubstr("holds no device reservation"));
  EXPECT_THAT(writer_.Whats(), ElementsAre("event Warning BindingFailed p"));
}

TEST_F(ServicesTest, TheHealthPassAsksForAHandshakeOnTheBackgroundBudget) {
  AddNode("n1");
  extender::HealthService health(backends_, writer_, clock_, std::chrono::seconds(60));
  std::map<std::string, NodeView> nodes;
  nodes["n1"] = feed_.state().FindNode("n1")->node;
  RunCoro(ioc_, [&]() -> asio::awaitable<void> { co_await health.Pass(nodes, feed_.state()); }());
  ASSERT_THAT(writer_.Whats(), ElementsAre("patch node n1"));
  EXPECT_EQ(writer_.calls[0].budget, extender::Budget::kBackground);
  const auto& value = writer_.calls[0].patch.at("metadata").at("annotations").at("hami.io/node-handshake");
  EXPECT_THAT(std::string(value.as_string()), StartsWith("Requesting_"));
  EXPECT_EQ(health.stats().passes, 1u);
}

TEST_F(ServicesTest, AnUnreadableRegistrationIsReportedOnceWithAnEventOnTheNode) {
  NodeView n;
  n.name = "bad";
  n.annotations["hami.io/node-nvidia-register"] = "not a manifest";
  feed_.UpsertNode(n);
  feed_.UpsertNode(n);
  EXPECT_THAT(writer_.Whats(), ElementsAre("event Warning InvalidDeviceRegistration bad"));
  EXPECT_EQ(feed_.unreadable_registrations(), 1u);
  EXPECT_EQ(feed_.stats().registration_errors, 1u);
}

TEST_F(ServicesTest, AReservationNeverBoundIsFreedAfterTheTimeout) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  Filter(pod, {"n1"});
  EXPECT_TRUE(expiry_.Expire(pods_).empty());
  EXPECT_TRUE(ledger_.reserved(pod.uid));  // nothing released
  EXPECT_NE(feed_.state().FindPod(pod.uid), nullptr);
  clock_.Advance(std::chrono::seconds(300));
  EXPECT_TRUE(expiry_.Expire(pods_).empty());  // nothing written to clear
  EXPECT_FALSE(ledger_.reserved(pod.uid));     // released
  EXPECT_EQ(feed_.state().FindPod(pod.uid), nullptr);
  EXPECT_EQ(expiry_.expired(), 1u);
}

}  // namespace
}  // namespace hami

namespace hami {
namespace {

TEST_F(ServicesTest, AdmissionPatchesAMemoryOnlyPodIntoOneForUs) {
  const Admitted a = Admit(admission_, R"({"metadata":{"generateName":"train-"},"spec":{"containers":[
      {"name":"app","image":"cuda","resources":{"limits":{"nvidia.com/gpumem":"3000"}}}]}})");
  ASSERT_TRUE(a.answer.allowed) << a.answer.message;
  EXPECT_EQ(a.pod.at("spec").at("schedulerName"), "hami-scheduler");
  EXPECT_EQ(a.pod.at("spec").at("containers").at(0).at("resources").at("limits"),
            boost::json::parse(R"({"nvidia.com/gpumem":"3000","nvidia.com/gpu":"1"})"));
  // Sent again (reinvocation, or a retry), the patched pod needs nothing more.
  const Admitted again = Admit(admission_, boost::json::serialize(a.pod));
  EXPECT_TRUE(again.answer.allowed);
  EXPECT_TRUE(again.answer.patch.empty()) << boost::json::serialize(again.answer.patch);
  EXPECT_EQ(admission_.stats().patched, 1u);
  EXPECT_EQ(admission_.stats().allowed, 1u);
}

TEST_F(ServicesTest, AdmissionDeniesOverTheQuotaTheLedgerKeeps) {
  ResourceQuotaView q;
  q.ns = "team";
  q.name = "gpu";
  q.hard["limits.nvidia.com/gpumem"] = "4000";
  feed_.state().quotas().UpsertQuota(q);
  const Admitted a = Admit(admission_, R"({"metadata":{"name":"big"},"spec":{"containers":[
      {"name":"app","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"5000"}}}]}})");
  EXPECT_FALSE(a.answer.allowed);
  EXPECT_EQ(a.answer.code, 403);
  EXPECT_THAT(a.answer.message, StartsWith("exceeding resource quota: nvidia.com/gpumem in namespace team"));
  EXPECT_EQ(admission_.stats().denied, 1u);
  k8s::prom::TextWriter w;
  admission_.WriteMetrics(w);
  EXPECT_THAT(w.Take(), HasSubstr("hami_scheduler_admission_requests_total{result=\"denied\"} 1\n"));
}

// Free capacity on /metrics: each node's largest slice per vendor, and the configured shapes' fits per node
// and in all, with the label values escaped.
TEST_F(ServicesTest, LedgerMetricsExportFreeCapacity) {
  AddNode("n1");
  AddNode("n\"2");
  testing::Hold(feed_.state(), "half", "n1", "NVIDIA", "n1-gpu0", 1, 8000, 0);
  const std::vector<CapacityShape> shapes{ParseCapacityShape("quarter=NVIDIA:1x4000:25").value(),
                                          ParseCapacityShape("pair=NVIDIA:2x1000").value()};
  k8s::prom::TextWriter w;
  feed_.WriteMetrics(w, false, shapes, "spread");
  const std::string text = w.Take();
  const std::string slice = "hami_scheduler_node_largest_free_slice_mib";
  // Sorted by node name, the quote escaped.
  EXPECT_THAT(text, HasSubstr("# TYPE " + slice + " gauge\n" + slice +
                              "{node=\"n\\\"2\",vendor=\"NVIDIA\"} 16000\n" + slice +
                              "{node=\"n1\",vendor=\"NVIDIA\"} 8000\n"));
  const std::string fits = "hami_scheduler_node_shape_fits";
  EXPECT_THAT(text, HasSubstr(fits + "{node=\"n\\\"2\",vendor=\"NVIDIA\",shape=\"quarter\"} 4\n"));
  EXPECT_THAT(text, HasSubstr(fits + "{node=\"n1\",vendor=\"NVIDIA\",shape=\"quarter\"} 2\n" + fits +
                              "{node=\"n1\",vendor=\"NVIDIA\",shape=\"pair\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE hami_scheduler_shape_fits_total gauge\n"
                              "hami_scheduler_shape_fits_total{vendor=\"NVIDIA\",shape=\"quarter\"} 6\n"
                              "hami_scheduler_shape_fits_total{vendor=\"NVIDIA\",shape=\"pair\"} 0\n"));
  // Without shapes: the slices alone.
  feed_.WriteMetrics(w, false);
  const std::string plain = w.Take();
  EXPECT_THAT(plain, HasSubstr(slice + "{node=\"n1\",vendor=\"NVIDIA\"} 8000\n"));
  EXPECT_THAT(plain, Not(HasSubstr("shape_fits")));
}

TEST_F(ServicesTest, AdmissionLeavesOtherSchedulersPodsAndOtherOperationsAlone) {
  const Admitted other = Admit(admission_, R"({"metadata":{"name":"x"},"spec":{"schedulerName":"volcano",
      "containers":[{"name":"app","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})");
  EXPECT_TRUE(other.answer.allowed);
  EXPECT_TRUE(other.answer.patch.empty());
  k8s::AdmissionRequest update;
  update.uid = "u";
  update.operation = "UPDATE";
  update.kind = "Pod";
  update.object = boost::json::parse(R"({"metadata":{"name":"x"},"spec":{"containers":[]}})");
  const k8s::AdmissionAnswer answer = extender::ReviewAdmission(admission_, update);
  EXPECT_TRUE(answer.allowed);
  EXPECT_TRUE(answer.patch.empty());
}

TEST_F(ServicesTest, AdmissionRefusesAnUnreadablePodWithTheField) {
  const Admitted a = Admit(admission_, R"({"metadata":{"name":"x"},"spec":{"containers":[
      {"name":"app","resources":{"limits":["nvidia.com/gpu"]}}]}})");
  EXPECT_FALSE(a.answer.allowed);
  EXPECT_EQ(a.answer.code, 400);
  EXPECT_THAT(a.answer.message, HasSubstr("spec.containers[0].resources.limits: expected an object"));
  EXPECT_EQ(admission_.stats().invalid, 1u);
}

extender::FilterOptions Annotating() {
  extender::FilterOptions options;
  options.refusal_annotation = true;
  return options;
}

// --refusal-annotation (docs/DECISIONS.md, "The refusal annotation"): a second filter service with the flag
// on, over the fixture's cluster.
class RefusalAnnotationTest : public ServicesTest {
 protected:
  FilterOutcome::Kind FilterWith(extender::FilterService& service, const PodView& pod,
                                 const std::vector<std::string>& nodes) {
    FilterOutcome out;
    RunCoro(ioc_, [&]() -> asio::awaitable<void> { out = co_await service.Filter(pod, nodes); }());
    return out.kind;
  }
  // Runs what the filter left to the event loop: the annotation's patches.
  void Settle() {
    ioc_.restart();
    ioc_.poll();
  }
  std::vector<testing::FakeWriter::Call> PodPatches() const {
    std::vector<testing::FakeWriter::Call> out;
    for (const auto& c : writer_.calls) {
      if (c.what.starts_with("patch pod ")) out.push_back(c);
    }
    return out;
  }
  static const boost::json::value& Annotation(const testing::FakeWriter::Call& patch) {
    return patch.patch.at("metadata").at("annotations").at(keys::kFilterRefusal);
  }
  // The pod as the watch (and kube-scheduler's next request) shows it once the last patch is applied.
  PodView Applied(PodView pod) {
    const testing::FakeWriter::Call last = PodPatches().back();
    const boost::json::value& value = Annotation(last);
    if (value.is_null()) {
      pod.annotations.erase(std::string(keys::kFilterRefusal));
    } else {
      pod.annotations[std::string(keys::kFilterRefusal)] = std::string(value.as_string());
    }
    pod.resource_version = std::to_string(std::stoi(pod.resource_version) + 1);
    pods_[pod.Key()] = pod;
    return pod;
  }
  std::string Metrics() const {
    k8s::prom::TextWriter w;
    annotating_.WriteMetrics(w);
    return w.Take();
  }

  extender::FilterService annotating_{feed_.state(),
                                      ledger_,
                                      binder_,
                                      pods_,
                                      writer_,
                                      clock_,
                                      Annotating(),
                                      0,
                                      readiness_,
                                      requeue_,
                                      scores_};
};

TEST_F(RefusalAnnotationTest, OffByDefault) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  EXPECT_EQ(Filter(pod, {"ghost"}).error, "");
  Settle();
  EXPECT_TRUE(PodPatches().empty());
  EXPECT_THAT(writer_.Whats(), ElementsAre("event Warning FilteringFailed p"));
}

// One patch per new reason, in the background on the background budget; none for the same reason again
// (later, too: the time stamp alone is no change); removed once the pod fits.
TEST_F(RefusalAnnotationTest, WrittenWhenTheReasonChangesAndRemovedOnceThePodFits) {
  AddNode("n1");
  PodView pod = GpuPod("p");
  EXPECT_EQ(FilterWith(annotating_, pod, {"ghost"}), FilterOutcome::Kind::kUnschedulable);
  Settle();
  ASSERT_EQ(PodPatches().size(), 1u);
  const auto first = PodPatches()[0];
  EXPECT_EQ(first.what, "patch pod default/p");
  EXPECT_EQ(first.budget, extender::Budget::kBackground);
  // The uid is a precondition: not a pod re-created under the name.
  EXPECT_EQ(first.patch.at("metadata").at("uid").as_string(), pod.uid);
  const std::string value(Annotation(first).as_string());
  EXPECT_THAT(value, StartsWith("2023-11-14T22:13:20Z: no node fits the pod's device request; 1 node: "));
  EXPECT_THAT(value, HasSubstr("(ghost)"));
  pod = Applied(pod);

  clock_.Advance(std::chrono::minutes(5));
  FilterWith(annotating_, pod, {"ghost"});
  Settle();
  EXPECT_EQ(PodPatches().size(), 1u);

  FilterWith(annotating_, pod, {"ghost", "ghost2"});
  Settle();
  ASSERT_EQ(PodPatches().size(), 2u);
  EXPECT_THAT(std::string(Annotation(PodPatches()[1]).as_string()),
              AllOf(StartsWith("2023-11-14T22:18:20Z: "), HasSubstr("2 nodes: "),
                    HasSubstr("(ghost, ghost2)")));
  pod = Applied(pod);

  EXPECT_EQ(FilterWith(annotating_, pod, {"n1"}), FilterOutcome::Kind::kScheduled);
  Settle();
  ASSERT_EQ(PodPatches().size(), 3u);
  EXPECT_TRUE(Annotation(PodPatches()[2]).is_null());
  EXPECT_EQ(PodPatches()[2].patch.at("metadata").at("uid").as_string(), pod.uid);
  EXPECT_THAT(Metrics(), AllOf(HasSubstr("hami_scheduler_refusal_annotations_total{result=\"written\"} 2"),
                               HasSubstr("hami_scheduler_refusal_annotations_total{result=\"removed\"} 1"),
                               HasSubstr("hami_scheduler_refusal_annotations_total{result=\"failed\"} 0")));
  EXPECT_FALSE(annotating_.busy());
}

// Neither copy of the pod shows a patch still queued: the queue itself says what the pod is about to carry.
// (The queue on its own: co_spawn posts, so nothing is sent before Settle.)
TEST_F(RefusalAnnotationTest, AQueuedPatchIsNotSentTwiceAndAPodThatFitsMeanwhileGetsNone) {
  const PodView pod = GpuPod("p");
  const PodView other = GpuPod("q");
  extender::RefusalAnnotations notes(pods_, writer_, readiness_);
  const auto executor = ioc_.get_executor();
  notes.Refused(pod, extender::RefusalAnnotation(clock_.Now(), "no room"), executor);
  clock_.Advance(std::chrono::seconds(1));
  notes.Refused(pod, extender::RefusalAnnotation(clock_.Now(), "no room"), executor);
  notes.Refused(other, extender::RefusalAnnotation(clock_.Now(), "no room"), executor);
  notes.Scheduled(other, executor);  // found a node before its refusal's patch went out
  EXPECT_EQ(notes.queued(), 1u);
  EXPECT_TRUE(notes.busy());
  Settle();
  ASSERT_EQ(PodPatches().size(), 1u);
  EXPECT_EQ(PodPatches()[0].what, "patch pod default/p");
  EXPECT_EQ(Annotation(PodPatches()[0]).as_string(), "2023-11-14T22:13:21Z: no room");  // the newer time
  EXPECT_FALSE(notes.busy());
}

// A stop does not wait for diagnostics: what is still queued is dropped.
TEST_F(RefusalAnnotationTest, AStopDropsWhatIsQueued) {
  const PodView pod = GpuPod("p");
  extender::RefusalAnnotations notes(pods_, writer_, readiness_);
  notes.Refused(pod, extender::RefusalAnnotation(clock_.Now(), "no room"), ioc_.get_executor());
  readiness_.Stop();
  Settle();
  EXPECT_TRUE(PodPatches().empty());
  EXPECT_EQ(notes.queued(), 0u);
  EXPECT_FALSE(notes.busy());
}

// A pod scheduled with the flag off still loses an annotation written while it was on.
TEST_F(RefusalAnnotationTest, RemovedWithTheFlagOffToo) {
  AddNode("n1");
  PodView pod = GpuPod("p");
  pod.annotations[std::string(keys::kFilterRefusal)] = "2023-11-14T22:13:20Z: no node fits";
  pods_[pod.Key()] = pod;
  Filter(pod, {"n1"});
  Settle();
  ASSERT_EQ(PodPatches().size(), 1u);
  EXPECT_TRUE(Annotation(PodPatches()[0]).is_null());
}

TEST_F(RefusalAnnotationTest, AFailedPatchIsCountedAndNeverThrown) {
  AddNode("n1");
  const PodView pod = GpuPod("p");
  extender::Leadership follower{extender::LeadershipOptions{true, "kube-system", "hami-scheduler", "a"}};
  extender::LeaderFencedWriter fenced(writer_, follower);  // a follower's writes are refused unsent
  extender::FilterService service{feed_.state(), ledger_, binder_, pods_, fenced, clock_,
                                  Annotating(), 0, readiness_, requeue_, scores_};
  FilterWith(service, pod, {"ghost"});
  Settle();
  EXPECT_TRUE(PodPatches().empty());
  k8s::prom::TextWriter w;
  service.WriteMetrics(w);
  EXPECT_THAT(w.Take(), HasSubstr("hami_scheduler_refusal_annotations_total{result=\"failed\"} 1"));
  EXPECT_FALSE(service.busy());
}

TEST_F(RefusalAnnotationTest, ALongReasonIsCutAtACharacterAndControlCharactersAreEscaped) {
  std::vector<std::string> nodes;
  for (char c : std::string("abcdef")) nodes.push_back(std::string(240, c));
  nodes.push_back("Odd\nnode\x01");  // named first (upper case sorts first)
  const PodView pod = GpuPod("p");
  FilterWith(annotating_, pod, nodes);
  Settle();
  ASSERT_EQ(PodPatches().size(), 1u);
  const std::string value(Annotation(PodPatches()[0]).as_string());
  EXPECT_LE(value.size(), extender::kRefusalAnnotationBytes);
  EXPECT_THAT(value, ::testing::EndsWith("\u2026"));
  EXPECT_THAT(value, HasSubstr("(Odd\\nnode\\x01, aaa"));

  const TimePoint at = clock_.Now();
  EXPECT_EQ(extender::RefusalAnnotation(at, "a\nb\tc\x01" "d\x7f"),
            "2023-11-14T22:13:20Z: a\\nb\\tc\\x01d\\x7f");
  // 22 bytes of time stamp, then two-byte characters: the cut falls inside one and moves before it.
  std::string wide;
  for (int i = 0; i < 600; ++i) wide += "\u00e9";
  const std::string cut = extender::RefusalAnnotation(at, wide);
  EXPECT_EQ(cut.size(), 22u + 998u + 3u);
  EXPECT_EQ(cut.substr(cut.size() - 5), "\u00e9\u2026");
  EXPECT_EQ(extender::RefusalReason(cut), cut.substr(22));
  EXPECT_EQ(extender::RefusalAnnotation(at, "short"), "2023-11-14T22:13:20Z: short");
}

}  // namespace
}  // namespace hami

namespace hami {
namespace {

LeaseView Lease(std::optional<std::string> holder, std::int64_t seconds = 15,
                std::string name = "hami-scheduler") {
  LeaseView l;
  l.ns = "kube-system";
  l.name = std::move(name);
  l.holder_identity = std::move(holder);
  l.lease_duration_seconds = seconds;
  return l;
}

// docs/DECISIONS.md, "Leadership": the co-located kube-scheduler's Lease decides; a plain prefix of the
// holder identity; leadership ends when the Lease is not renewed within its duration, with no event needed.
TEST(Leadership, FollowsTheKubeSchedulersLease) {
  std::chrono::steady_clock::time_point now{std::chrono::hours(1)};
  const extender::Leadership::Now clock = [&now] { return now; };
  extender::Leadership off(extender::LeadershipOptions{}, clock);
  EXPECT_TRUE(off.leader());

  extender::Leadership l(extender::LeadershipOptions{true, "kube-system", "hami-scheduler", "node-a"}, clock);
  EXPECT_FALSE(l.leader());
  EXPECT_EQ(l.Describe(), "follower: Lease kube-system/hami-scheduler not seen");
  std::uint64_t notified = l.changed().notifications();

  const LeaseView ours = Lease("node-a_6f1c2d");
  l.Observe(&ours);
  EXPECT_TRUE(l.leader());
  EXPECT_EQ(l.Describe(), "leader");
  EXPECT_EQ(l.changed().notifications(), ++notified);
  l.Observe(&ours);  // a renewal: no change to announce
  EXPECT_EQ(l.changed().notifications(), notified);

  const LeaseView other_name = Lease("node-b_1", 15, "other");
  l.Observe(&other_name);  // another Lease: ignored
  EXPECT_TRUE(l.leader());

  now += std::chrono::seconds(14);
  EXPECT_TRUE(l.leader());
  now += std::chrono::seconds(1);
  EXPECT_FALSE(l.leader());  // not renewed within leaseDurationSeconds
  EXPECT_EQ(l.Describe(),
            "follower: Lease kube-system/hami-scheduler held by node-a_6f1c2d expired (not renewed)");

  const LeaseView theirs = Lease("node-b_99");
  l.Observe(&theirs);
  EXPECT_FALSE(l.leader());
  EXPECT_EQ(l.Describe(), "follower: Lease kube-system/hami-scheduler is held by node-b_99 (we are node-a)");
  l.Observe(&ours);  // regained after the expiry
  EXPECT_TRUE(l.leader());
  EXPECT_EQ(l.changed().notifications(), ++notified);
  l.Observe(&theirs);  // lost by an event: announced
  EXPECT_EQ(l.changed().notifications(), ++notified);
  l.Observe(&ours);
  l.Observe(nullptr);  // deleted
  EXPECT_FALSE(l.leader());
  const LeaseView released = Lease(std::nullopt);
  l.Observe(&released);
  EXPECT_EQ(l.Describe(), "follower: Lease kube-system/hami-scheduler has no holder");
  const LeaseView no_duration = Lease("node-a_6f1c2d", 0);
  l.Observe(&no_duration);
  EXPECT_FALSE(l.leader());
  EXPECT_EQ(l.Describe(),
            "follower: Lease kube-system/hami-scheduler held by node-a_6f1c2d has no leaseDurationSeconds");
  // A prefix is not enough: host node-a does not lead with node-ab's Lease.
  const LeaseView longer_host = Lease("node-ab_1");
  l.Observe(&longer_host);
  EXPECT_FALSE(l.leader());
}

// Every write goes through the fence: a follower's is refused unsent (a bind that waited for a lock while
// leadership moved writes no Binding), its events dropped; reads pass.
TEST(Leadership, AFollowerWritesNothingThroughTheFence) {
  std::chrono::steady_clock::time_point now{std::chrono::hours(1)};
  extender::Leadership l(extender::LeadershipOptions{true, "kube-system", "hami-scheduler", "node-a"},
                         [&now] { return now; });
  testing::FakeWriter inner;
  inner.nodes["n1"] = extender::ObjectMeta{"1", {}};
  extender::LeaderFencedWriter fenced(inner, l);
  asio::io_context ioc;
  const boost::json::value patch = {{"metadata", {{"labels", {{"a", "b"}}}}}};
  std::string refusal;
  RunCoro(ioc, [&]() -> asio::awaitable<void> {
    auto r = co_await fenced.PatchNode("n1", patch, extender::Budget::kBackground);
    EXPECT_FALSE(r);
    if (!r) refusal = r.error().message;
    auto read = co_await fenced.ReadNode("n1");
    EXPECT_TRUE(read);
  }());
  fenced.Event(k8s::InvolvedObject{}, "Normal", "X", "y");
  EXPECT_EQ(
      refusal,
      "patch of node n1 not sent: this replica is not the leader (follower: Lease kube-system/hami-scheduler "
      "not seen)");
  EXPECT_EQ(fenced.refused(), 2u);
  const auto patches = [&inner] {
    const auto whats = inner.Whats();
    return std::count(whats.begin(), whats.end(), "patch node n1");
  };
  EXPECT_EQ(patches(), 0);
  const LeaseView ours = Lease("node-a_1");
  l.Observe(&ours);
  RunCoro(ioc, [&]() -> asio::awaitable<void> {
    auto r = co_await fenced.PatchNode("n1", patch, extender::Budget::kBackground);
    EXPECT_TRUE(r);
  }());
  EXPECT_EQ(patches(), 1);
}

TEST(Leadership, LeasesAreReadWithTheirFields) {
  auto l = k8s::LeaseFromJson(
      boost::json::parse(R"({"metadata":{"name":"hami-scheduler","namespace":"kube-system"},
      "spec":{"holderIdentity":"host_1","leaseDurationSeconds":15,"renewTime":"2026-12-01T10:00:00.000000Z"}})"));
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->holder_identity, "host_1");
  EXPECT_EQ(l->lease_duration_seconds, 15);
  auto released = k8s::LeaseFromJson(boost::json::parse(R"({"metadata":{"name":"x"},"spec":{}})"));
  ASSERT_TRUE(released);
  EXPECT_FALSE(released->holder_identity);
  EXPECT_EQ(l->renew_time, "2026-12-01T10:00:00.000000Z");
  auto huge = k8s::LeaseFromJson(
      boost::json::parse(R"({"metadata":{"name":"x"},"spec":{"leaseDurationSeconds":9300000000}})"));
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().message, "Lease default/x: spec.leaseDurationSeconds: expected an int32");
  // Not positive: read (as an expired record), not refused.
  auto negative = k8s::LeaseFromJson(
      boost::json::parse(R"({"metadata":{"name":"x"},"spec":{"holderIdentity":"a","leaseDurationSeconds":-5}})"));
  ASSERT_TRUE(negative) << negative.error().message;
  EXPECT_EQ(negative->lease_duration_seconds, -5);
}

// Following kube-scheduler's Lease: a write that leaves the leader record as it was (an annotation, a label)
// is no renewal; a new renewTime is. After the co-located kube-scheduler died, a reconciler touching its
// Lease must not keep us leading past the lease duration.
TEST(Leadership, OnlyAChangedRecordRenewsTheTerm) {
  std::chrono::steady_clock::time_point now{std::chrono::hours(1)};
  extender::Leadership l(extender::LeadershipOptions{true, "kube-system", "hami-scheduler", "node-b"},
                         [&now] { return now; });
  LeaseView mine = Lease("node-b_1");
  mine.renew_time = "2026-12-01T10:00:15.000000Z";
  l.Observe(&mine);
  EXPECT_TRUE(l.leader());
  now += std::chrono::seconds(10);
  l.Observe(&mine);  // annotated only
  now += std::chrono::seconds(5);
  EXPECT_FALSE(l.leader());
  mine.renew_time = "2026-12-01T10:00:30.000000Z";
  l.Observe(&mine);
  EXPECT_TRUE(l.leader());
}

}  // namespace
}  // namespace hami
