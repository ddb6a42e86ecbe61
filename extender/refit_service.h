#pragma once
// POST /refit: the NVIDIA device plugin, handed other cards by the kubelet's Topology Manager than the ones
// chosen for a container, asks that the container's cards be chosen again among those it may use (HAMi's
// NUMA refit). The caller is authenticated first: a TokenReview of its bound service-account token must
// name the device plugin's account and a pod of it running on the node the request names. Then, under the
// node's allocation lock as the bind takes it, the container alone is fitted again by the fit engine, on
// the allowed cards, against the node's usage less the container's own charge; the new cards are charged
// in the ledger at once and written into both allocation annotations in one compare-and-swap merge patch
// (docs/DECISIONS.md, "NUMA refit").
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "core/scheduler.h"
#include "extender/cluster_writer.h"
#include "extender/ledger_feed.h"
#include "extender/lock_queue.h"
#include "extender/options.h"
#include "extender/pod_ledger.h"
#include "k8s/metrics.h"

namespace hami::extender {

// The one vendor whose device plugin asks for refits.
inline constexpr std::string_view kRefitDeviceType = "NVIDIA";
inline constexpr std::size_t kMaxAllowedDevices = 512;
// A bearer token longer than this, or not shaped as a JWT, is refused before any TokenReview.
inline constexpr std::size_t kMaxTokenBytes = 8192;
// TokenReviews in flight at once; a caller beyond them is answered 429 without one.
inline constexpr std::size_t kMaxReviewsInFlight = 4;

struct RefitRequest {
  std::string pod_uid, pod_ns, pod_name, node;
  std::size_t container_index = 0;  // init containers first
  std::string container_name;       // "" when not given
  std::string device_type;
  std::vector<std::string> allowed;  // card UUIDs, 1 to kMaxAllowedDevices
};

// `status` is the HTTP status: 200 for every answer to an authenticated caller (succeeded or not, as HAMi
// answers), 400/413 for a request that cannot be read, 401 for a token that is not one, 403 for a caller
// that is not the device plugin on that node, 429 (with Retry-After) when too many callers are being
// reviewed, 503 when refits cannot be served now.
struct RefitAnswer {
  unsigned status = 200;
  bool retry_after = false;  // answered with Retry-After: 1
  bool succeeded = false;
  bool moved = false;  // the container's cards changed (not sent)
  std::string container_devices;
  std::string failure_reason;
};

// The request as the plugin sends it, checked field by field: an error names the field and what it wants.
Result<RefitRequest> ParseRefitRequest(std::string_view body);
std::string RefitAnswerJson(const RefitAnswer& answer);

class RefitService {
 public:
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as the service.
  RefitService(LedgerFeed& feed, const PodLedger& ledger, const std::map<std::string, PodView>& pods,
               LockQueue& queue, NodeLocker& locker, ClusterWriter& writer, const Clock& clock,
               RefitOptions options, SchedulerOptions policies);

  // `authorization`: the request's Authorization header, as sent.
  boost::asio::awaitable<RefitAnswer> Refit(const RefitRequest& request, std::string_view authorization);
  // A request answered before the service saw it (unreadable, too large, not the leader): counted.
  RefitAnswer Refuse(unsigned status, std::string reason);

  std::size_t verdicts_kept() const { return verdicts_.size(); }
  std::size_t rejections_kept() const { return rejected_.size(); }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  // A positive TokenReview, kept for its token's hash.
  struct Verdict {
    std::string pod_name, pod_uid;  // the device plugin's pod the token is bound to
    TimePoint until;
  };
  // A negative TokenReview, kept for its token's hash: a replayed bad token costs no review.
  struct Rejection {
    unsigned status;
    std::string reason;
    TimePoint until;
  };
  // What the refit works on, once found and checked.
  struct Target {
    PodView pod;
    const Backend* backend = nullptr;
    ContainerDevices current;
  };

  boost::asio::awaitable<RefitAnswer> Decide(const RefitRequest& request, std::string_view authorization,
                                             TimePoint start);
  // nullopt when the caller is the device plugin's pod on the request's node; else the refusal.
  boost::asio::awaitable<std::optional<RefitAnswer>> Authenticate(const RefitRequest& request,
                                                                  std::string_view authorization);
  // The verdict of a TokenReview (kept when positive); nullopt and `refused` set when the caller is not let
  // in.
  boost::asio::awaitable<std::optional<Verdict>> Review(const std::string& token, const std::string& hash,
                                                        RefitAnswer& refused);
  boost::asio::awaitable<std::optional<RefitAnswer>> CheckCallerPod(const RefitRequest& request,
                                                                    const Verdict& verdict);
  // The pod and the container's cards, or why not.
  Result<Target> Locate(const RefitRequest& request) const;
  // The refusal of a request Locate refused: an event only on a pod that is on the request's node.
  RefitAnswer NotLocated(const RefitRequest& request, std::string reason);
  // The answer when the container's cards are all allowed already (no write), else nullopt.
  static std::optional<RefitAnswer> Unchanged(const RefitRequest& request, const Target& target);
  // Authenticate's review step: the kept rejection, 429 beyond kMaxReviewsInFlight, or the review.
  boost::asio::awaitable<std::optional<Verdict>> ReviewOnce(const std::string& token, const std::string& hash,
                                                            RefitAnswer& refused);
  void Reject(const std::string& hash, const RefitAnswer& refused);
  // Decide's part from the node's lock on; Move its part under it, on the pod as the cache shows it then.
  boost::asio::awaitable<RefitAnswer> Locked(const RefitRequest& request, TimePoint start);
  boost::asio::awaitable<RefitAnswer> Move(const RefitRequest& request, TimePoint start);
  // Why no write may start any more (less than the patch reserve of the plugin's budget left), or nullopt.
  std::optional<std::string> TooLate(TimePoint start) const;
  // After a conflict: the pod read once and written once more, each only while the reserve is left.
  boost::asio::awaitable<ApiResult<void>> Retry(const RefitRequest& request, const Target& target,
                                                const ContainerDevices& chosen, TimePoint start);
  // The container's new cards on the allowed ones (the fit engine's), or why none.
  Result<ContainerDevices> Choose(const RefitRequest& request, const Target& target);
  // Charges the move, writes it (one retry after a conflict), and takes the charge back when it fails.
  boost::asio::awaitable<Result<void>> Commit(const RefitRequest& request, const Target& target,
                                              const ContainerDevices& chosen, TimePoint start);
  boost::asio::awaitable<ApiResult<void>> Patch(const RefitRequest& request, const Target& target,
                                                const PodView& pod, const ContainerDevices& chosen);
  RefitAnswer Refused(const PodView* pod, unsigned status, std::string reason);
  void Count(const RefitAnswer& answer, double seconds);

  LedgerFeed* feed_;
  const PodLedger* ledger_;
  const std::map<std::string, PodView>* pods_;
  LockQueue* queue_;
  NodeLocker* locker_;
  ClusterWriter* writer_;
  const Clock* clock_;
  RefitOptions options_;
  SchedulerOptions policies_;
  std::unordered_map<std::string, Verdict> verdicts_;    // SHA-256 of the token (hex) -> verdict
  std::unordered_map<std::string, Rejection> rejected_;  // SHA-256 of the token (hex) -> refusal
  std::size_t reviews_in_flight_ = 0;
  std::unordered_set<std::string> refitting_;  // uids of the pods a refit runs for
  k8s::prom::Histogram latency_;
  std::map<std::string, std::uint64_t> results_;
};

}  // namespace hami::extender
