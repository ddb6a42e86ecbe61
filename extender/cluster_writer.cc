#include "extender/cluster_writer.h"

#include "k8s/objects.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

ObjectMeta MetaOf(const json::value& object) {
  ObjectMeta m;
  const json::object* obj = object.if_object();
  const json::value* meta = obj ? obj->if_contains("metadata") : nullptr;
  if (meta == nullptr || !meta->is_object()) return m;
  if (auto* rv = meta->get_object().if_contains("resourceVersion"); rv && rv->is_string())
    m.resource_version = std::string(rv->get_string());
  if (auto* ann = meta->get_object().if_contains("annotations"); ann && ann->is_object()) {
    for (const auto& [k, v] : ann->get_object()) {
      if (v.is_string()) m.annotations[std::string(k)] = std::string(v.get_string());
    }
  }
  return m;
}

}  // namespace

asio::awaitable<ApiResult<ObjectMeta>> ApiClusterWriter::PatchNode(const std::string& node,
                                                                   const json::value& patch, Budget budget) {
  auto r = co_await Client(budget).MergePatch(k8s::PathFor("v1", "nodes", "", node), patch);
  if (!r) co_return r.error();
  co_return MetaOf(*r);
}

asio::awaitable<ApiResult<void>> ApiClusterWriter::PatchPod(const std::string& ns, const std::string& name,
                                                            const json::value& patch, Budget budget) {
  auto r = co_await Client(budget).MergePatch(k8s::PathFor("v1", "pods", ns, name), patch);
  if (!r) co_return r.error();
  co_return ApiResult<void>{};
}

asio::awaitable<ApiResult<ObjectMeta>> ApiClusterWriter::ReadNode(const std::string& node) {
  auto r = co_await decisions_->Get(k8s::PathFor("v1", "nodes", "", node));
  if (!r) co_return r.error();
  co_return MetaOf(*r);
}

asio::awaitable<ApiResult<PodView>> ApiClusterWriter::ReadPod(const std::string& ns,
                                                              const std::string& name) {
  auto r = co_await decisions_->Get(k8s::PathFor("v1", "pods", ns, name));
  if (!r) co_return r.error();
  auto view = k8s::PodFromJson(*r);
  if (!view) co_return ApiError{ApiErrorKind::kOther, kUnreadableObject, "", view.error().message};
  co_return std::move(*view);
}

asio::awaitable<ApiResult<void>> ApiClusterWriter::Bind(const BindingWrite& b) {
  co_return co_await decisions_->Bind(b.ns, b.name, b.uid, b.node, b.annotations, b.labels);
}

namespace {

TokenReviewStatus ReviewStatusOf(const json::value& review) {
  TokenReviewStatus out;
  const json::object* obj = review.if_object();
  const json::value* status = obj ? obj->if_contains("status") : nullptr;
  if (status == nullptr || !status->is_object()) return out;
  const json::object& st = status->get_object();
  if (auto* a = st.if_contains("authenticated"); a && a->is_bool()) out.authenticated = a->get_bool();
  if (auto* e = st.if_contains("error"); e && e->is_string()) out.error = std::string(e->get_string());
  const json::value* user = st.if_contains("user");
  if (user == nullptr || !user->is_object()) return out;
  if (auto* u = user->get_object().if_contains("username"); u && u->is_string())
    out.username = std::string(u->get_string());
  if (auto* extra = user->get_object().if_contains("extra"); extra && extra->is_object()) {
    for (const auto& [k, values] : extra->get_object()) {
      if (!values.is_array()) continue;
      auto& kept = out.extra[std::string(k)];
      for (const auto& v : values.get_array()) {
        if (v.is_string()) kept.emplace_back(v.get_string());
      }
    }
  }
  return out;
}

}  // namespace

asio::awaitable<ApiResult<TokenReviewStatus>> ApiClusterWriter::ReviewToken(const std::string& token) {
  // No audiences: the API server's own, which a projected service-account token carries.
  const json::value review = {
      {"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"spec", {{"token", token}}}};
  const std::string path = "/apis/authentication.k8s.io/v1/tokenreviews";
  // Never on the decisions' client: a caller not yet authenticated must not spend what binds wait for.
  auto r = co_await reviews_->Create(path, review);
  if (!r) co_return r.error();
  co_return ReviewStatusOf(*r);
}

void ApiClusterWriter::Event(const k8s::InvolvedObject& object, std::string_view type,
                             std::string_view reason, std::string message) {
  events_->Record(object, type, reason, std::move(message));
}

}  // namespace hami::extender
