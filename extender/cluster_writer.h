#pragma once
// The port through which the extender's services act on the cluster, and read what their caches cannot
// tell: patches, the Binding, events. ApiClusterWriter sends them to the API server; the services' tests
// put a recording fake behind it (tests/unit/extender), so every service is tested without HTTP.
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "k8s/api_client.h"
#include "k8s/events.h"

namespace hami::extender {

using k8s::ApiError;
using k8s::ApiErrorKind;
using k8s::ApiResult;

// The status of an ApiError for an object the API server returned (HTTP 200) that cannot be read: it exists,
// but its content is unusable.
inline constexpr unsigned kUnreadableObject = 200;

// Whose share of the API budget a write spends.
enum class Budget {
  kDecision,    // a /filter or /bind answer waits for it
  kBackground,  // health handshakes, expiry clean-ups: only tokens no decision has booked
};

// What a read or a patch shows of an object's metadata (string annotations only).
struct ObjectMeta {
  std::string resource_version;
  Annotations annotations;
};

struct BindingWrite {
  std::string ns, name, uid, node;
  std::map<std::string, std::string> annotations, labels;  // written with spec.nodeName
};

// What a TokenReview (authentication.k8s.io/v1) says of a bearer token.
struct TokenReviewStatus {
  bool authenticated = false;
  std::string username;
  std::map<std::string, std::vector<std::string>> extra;  // e.g. the pod a service-account token is bound to
  std::string error;                                      // why not authenticated, when the server says
};

class ClusterWriter {
 public:
  virtual ~ClusterWriter() = default;
  // Merge patches (a compare-and-swap when the patch carries metadata.resourceVersion).
  virtual boost::asio::awaitable<ApiResult<ObjectMeta>> PatchNode(const std::string& node,
                                                                  const boost::json::value& patch,
                                                                  Budget budget) = 0;
  virtual boost::asio::awaitable<ApiResult<void>> PatchPod(const std::string& ns, const std::string& name,
                                                           const boost::json::value& patch,
                                                           Budget budget) = 0;
  virtual boost::asio::awaitable<ApiResult<ObjectMeta>> ReadNode(const std::string& node) = 0;
  virtual boost::asio::awaitable<ApiResult<PodView>> ReadPod(const std::string& ns,
                                                             const std::string& name) = 0;
  virtual boost::asio::awaitable<ApiResult<void>> Bind(const BindingWrite& binding) = 0;
  // Who `token` is, by a TokenReview without audiences (the token itself never reaches a log).
  virtual boost::asio::awaitable<ApiResult<TokenReviewStatus>> ReviewToken(const std::string& token) = 0;
  // Queued; posted by the event recorder on a budget of its own.
  virtual void Event(const k8s::InvolvedObject& object, std::string_view type, std::string_view reason,
                     std::string message) = 0;
};

// The port on the API server: decisions and background writes on their clients (which share one rate
// limit), events through the recorder, TokenReviews on `reviews` (the background client when none is given).
class ApiClusterWriter final : public ClusterWriter {
 public:
  ApiClusterWriter(k8s::ApiClient& decisions, k8s::ApiClient& background, k8s::EventRecorder& events,
                   k8s::ApiClient* reviews = nullptr)
      : decisions_(&decisions),
        background_(&background),
        events_(&events),
        reviews_(reviews ? reviews : &background) {}

  boost::asio::awaitable<ApiResult<ObjectMeta>> PatchNode(const std::string& node,
                                                          const boost::json::value& patch,
                                                          Budget budget) override;
  boost::asio::awaitable<ApiResult<void>> PatchPod(const std::string& ns, const std::string& name,
                                                   const boost::json::value& patch, Budget budget) override;
  boost::asio::awaitable<ApiResult<ObjectMeta>> ReadNode(const std::string& node) override;
  boost::asio::awaitable<ApiResult<PodView>> ReadPod(const std::string& ns, const std::string& name) override;
  boost::asio::awaitable<ApiResult<void>> Bind(const BindingWrite& binding) override;
  boost::asio::awaitable<ApiResult<TokenReviewStatus>> ReviewToken(const std::string& token) override;
  void Event(const k8s::InvolvedObject& object, std::string_view type, std::string_view reason,
             std::string message) override;

 private:
  k8s::ApiClient& Client(Budget budget) { return budget == Budget::kBackground ? *background_ : *decisions_; }

  k8s::ApiClient* decisions_;
  k8s::ApiClient* background_;
  k8s::EventRecorder* events_;
  k8s::ApiClient* reviews_;
};

}  // namespace hami::extender
