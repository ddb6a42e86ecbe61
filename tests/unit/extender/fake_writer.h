#pragma once
// A ClusterWriter that records every effect and answers from a small in-memory cluster: nodes' metadata
// (resourceVersion and annotations, patched with merge-patch semantics and compare-and-swap) and pods.
// The services' tests run against it without HTTP.
#include <boost/json.hpp>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "extender/cluster_writer.h"

namespace hami::testing {

class FakeWriter final : public extender::ClusterWriter {
 public:
  struct Call {
    std::string what;  // "patch node n1", "patch pod ns/p", "bind ns/p n1", "event Normal FilteringSucceed"
    boost::json::value patch;
    extender::Budget budget = extender::Budget::kDecision;
  };
  std::vector<Call> calls;
  std::map<std::string, extender::ObjectMeta> nodes;
  std::map<std::string, PodView> pods;  // "ns/name"
  std::vector<extender::BindingWrite> bindings;
  std::deque<extender::ApiError> fail_next_bind;       // errors the next Bind calls answer
  std::deque<extender::ApiError> fail_next_pod_patch;  // errors the next PatchPod calls answer
  // What a TokenReview says of each token (a token not listed: not authenticated).
  std::map<std::string, extender::TokenReviewStatus> token_reviews;
  std::function<void()> on_review;  // runs at each TokenReview (a test's clock moving meanwhile)
  // Awaited at each TokenReview, PatchPod and PatchNode: another refit run while one waits, a throw.
  std::function<boost::asio::awaitable<void>()> during_review, before_pod_patch, before_node_patch;
  std::optional<extender::ApiError> review_error;  // what every TokenReview answers, when set

  std::vector<std::string> Whats() const {
    std::vector<std::string> out;
    for (const auto& c : calls) out.push_back(c.what);
    return out;
  }

  boost::asio::awaitable<extender::ApiResult<extender::ObjectMeta>> PatchNode(
      const std::string& node, const boost::json::value& patch, extender::Budget budget) override {
    calls.push_back({"patch node " + node, patch, budget});
    if (auto hook = before_node_patch) co_await hook();
    auto it = nodes.find(node);
    if (it == nodes.end())
      co_return extender::ApiError{extender::ApiErrorKind::kNotFound, 404, "NotFound", node};
    const auto& meta = patch.at("metadata").as_object();
    if (auto* rv = meta.if_contains("resourceVersion"); rv && rv->as_string() != it->second.resource_version)
      co_return extender::ApiError{extender::ApiErrorKind::kConflict, 409, "Conflict", node};
    if (auto* ann = meta.if_contains("annotations")) {
      for (const auto& [k, v] : ann->as_object()) {
        if (v.is_null()) {
          it->second.annotations.erase(std::string(k));
        } else {
          it->second.annotations[std::string(k)] = std::string(v.as_string());
        }
      }
    }
    it->second.resource_version = std::to_string(std::stoi(it->second.resource_version) + 1);
    co_return it->second;
  }
  boost::asio::awaitable<extender::ApiResult<void>> PatchPod(const std::string& ns, const std::string& name,
                                                             const boost::json::value& patch,
                                                             extender::Budget budget) override {
    calls.push_back({"patch pod " + ns + "/" + name, patch, budget});
    if (auto hook = before_pod_patch) co_await hook();
    if (!fail_next_pod_patch.empty()) {
      auto e = fail_next_pod_patch.front();
      fail_next_pod_patch.pop_front();
      co_return e;
    }
    // A pod the fake holds is patched as the API server would: compare-and-swap, annotations merged.
    auto it = pods.find(ns + "/" + name);
    const auto* meta = patch.as_object().if_contains("metadata");
    if (it == pods.end() || meta == nullptr) co_return extender::ApiResult<void>{};
    if (auto* rv = meta->as_object().if_contains("resourceVersion");
        rv && rv->as_string() != it->second.resource_version)
      co_return extender::ApiError{extender::ApiErrorKind::kConflict, 409, "Conflict", ns + "/" + name};
    if (auto* ann = meta->as_object().if_contains("annotations")) {
      for (const auto& [k, v] : ann->as_object()) {
        if (v.is_null()) {
          it->second.annotations.erase(std::string(k));
        } else {
          it->second.annotations[std::string(k)] = std::string(v.as_string());
        }
      }
    }
    std::string& version = it->second.resource_version;
    if (!version.empty() && version.find_first_not_of("0123456789") == std::string::npos)
      version = std::to_string(std::stoll(version) + 1);
    co_return extender::ApiResult<void>{};
  }
  boost::asio::awaitable<extender::ApiResult<extender::ObjectMeta>> ReadNode(
      const std::string& node) override {
    calls.push_back({"read node " + node, {}, extender::Budget::kDecision});
    auto it = nodes.find(node);
    if (it == nodes.end())
      co_return extender::ApiError{extender::ApiErrorKind::kNotFound, 404, "NotFound", node};
    co_return it->second;
  }
  boost::asio::awaitable<extender::ApiResult<PodView>> ReadPod(const std::string& ns,
                                                               const std::string& name) override {
    calls.push_back({"read pod " + ns + "/" + name, {}, extender::Budget::kDecision});
    auto it = pods.find(ns + "/" + name);
    if (it == pods.end())
      co_return extender::ApiError{extender::ApiErrorKind::kNotFound, 404, "NotFound", ns + "/" + name};
    co_return it->second;
  }
  boost::asio::awaitable<extender::ApiResult<void>> Bind(const extender::BindingWrite& b) override {
    calls.push_back({"bind " + b.ns + "/" + b.name + " " + b.node, {}, extender::Budget::kDecision});
    if (!fail_next_bind.empty()) {
      auto e = fail_next_bind.front();
      fail_next_bind.pop_front();
      co_return e;
    }
    bindings.push_back(b);
    auto& pod = pods[b.ns + "/" + b.name];
    pod.node_name = b.node;
    for (const auto& [k, v] : b.annotations) pod.annotations[k] = v;
    co_return extender::ApiResult<void>{};
  }
  boost::asio::awaitable<extender::ApiResult<extender::TokenReviewStatus>> ReviewToken(
      const std::string& token) override {
    calls.push_back({"token review", {}, extender::Budget::kDecision});  // never the token itself
    if (on_review) on_review();
    if (auto hook = during_review) co_await hook();
    if (review_error) co_return *review_error;
    auto it = token_reviews.find(token);
    if (it == token_reviews.end()) {
      extender::TokenReviewStatus refused;
      refused.error = "invalid bearer token";
      co_return refused;
    }
    co_return it->second;
  }
  void Event(const k8s::InvolvedObject& object, std::string_view type, std::string_view reason,
             std::string message) override {
    calls.push_back({"event " + std::string(type) + " " + std::string(reason) + " " + object.name,
                     boost::json::value(message), extender::Budget::kDecision});
  }
};

}  // namespace hami::testing
