#pragma once
// List + watch of one resource into a local cache, with client-go's reflector semantics: the first list from
// resourceVersion "0" (pages of `page_size`), then a watch from the list's version with bookmarks and a
// random timeout of 5-10 minutes; on 410 (HTTP status or ERROR event) a relist from the last version (and
// from "" if that is gone too); objects that vanished while disconnected are delivered as deletes after the
// relist; capped exponential backoff with jitter (0.8 s doubling to 30 s) between failures; 429 and transport
// errors re-watch without relisting. Handlers run on the loop thread.
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "core/result.h"
#include "k8s/api_client.h"

namespace hami::k8s {

// "ns/name", or "name" for cluster-scoped objects.
std::string ObjectKeyOf(const boost::json::value& object);
std::string ResourceVersionOf(const boost::json::value& object);
// resourceVersions are opaque, but etcd's (and the embedded server's) are increasing integers: when both
// read as integers, a larger one is a later state. False when either is not an integer (unless equal).
bool LaterOrSame(const std::string& rv, const std::string& reference);

class Reflector {
 public:
  struct Handlers {
    std::function<void(const boost::json::value& object)> on_add;
    std::function<void(const boost::json::value& old_object, const boost::json::value& object)> on_update;
    std::function<void(const boost::json::value& last_known)> on_delete;
    std::function<void()> on_synced;  // after every complete list
  };
  struct Options {
    std::string path;  // e.g. /api/v1/pods
    std::string label_selector;
    std::string field_selector;
    std::int64_t page_size = 500;
    std::chrono::seconds min_watch_timeout{300};
    std::chrono::seconds max_watch_timeout{600};
    std::chrono::milliseconds backoff_initial{800};
    std::chrono::milliseconds backoff_max{30000};
    // false: after the handlers have seen an object, keep only its name, namespace and resourceVersion
    // (enough to diff a relist and to report deletes). Typed informers keep their own views instead.
    bool keep_objects = true;
  };
  struct Stats {
    std::size_t lists = 0;
    std::size_t watches = 0;
    std::size_t expired = 0;  // 410s seen
    std::size_t errors = 0;
    std::size_t events = 0;
  };

  Reflector(ApiClient& client, Options options, Handlers handlers);

  // Runs until cancelled (the caller's cancellation slot) and never returns otherwise.
  boost::asio::awaitable<void> Run();

  bool synced() const { return synced_; }
  const std::map<std::string, boost::json::value>& items() const { return items_; }
  const std::string& resource_version() const { return rv_; }
  const Stats& stats() const { return stats_; }

 private:
  boost::asio::awaitable<ApiResult<void>> ListAll(const std::string& rv);
  void Apply(WatchEvent&& ev);
  boost::json::value Keep(boost::json::value object) const;

  ApiClient* client_;
  Options options_;
  Handlers handlers_;
  std::map<std::string, boost::json::value> items_;
  std::string rv_;
  bool synced_ = false;
  Stats stats_;
  std::mt19937 rng_;
};

// A reflector that keeps typed views (NodeView, PodView...) next to the raw objects. `convert` failures are
// counted and the object is left out (the API server validated it; a failure means a field we read is odd).
template <class View>
class Informer {
 public:
  using Convert = std::function<Result<View>(const boost::json::value&)>;
  struct Handlers {
    std::function<void(const View&)> on_add;
    std::function<void(const View& old_view, const View& view)> on_update;
    std::function<void(const View&)> on_delete;
    std::function<void()> on_synced;
  };

  Informer(ApiClient& client, Reflector::Options options, Convert convert, Handlers handlers = {})
      : convert_(std::move(convert)),
        handlers_(std::move(handlers)),
        reflector_(client, WithoutObjects(std::move(options)), MakeHandlers()) {}

  // Replaces the handlers; before Run() (the services an event reaches may be built after their cache).
  void SetHandlers(Handlers handlers) { handlers_ = std::move(handlers); }

  boost::asio::awaitable<void> Run() { return reflector_.Run(); }
  bool synced() const { return reflector_.synced(); }
  const std::map<std::string, View>& views() const { return views_; }
  const Reflector& reflector() const { return reflector_; }
  std::size_t conversion_errors() const { return conversion_errors_; }

 private:
  static Reflector::Options WithoutObjects(Reflector::Options o) {
    o.keep_objects = false;  // the views are the cache; raw JSON would double the memory
    return o;
  }
  Reflector::Handlers MakeHandlers() {
    Reflector::Handlers h;
    h.on_add = [this](const boost::json::value& o) { Upsert(o); };
    h.on_update = [this](const boost::json::value&, const boost::json::value& o) { Upsert(o); };
    h.on_delete = [this](const boost::json::value& o) {
      auto it = views_.find(ObjectKeyOf(o));
      if (it == views_.end()) return;
      View last = std::move(it->second);
      views_.erase(it);
      if (handlers_.on_delete) handlers_.on_delete(last);
    };
    h.on_synced = [this] {
      if (handlers_.on_synced) handlers_.on_synced();
    };
    return h;
  }
  void Upsert(const boost::json::value& o) {
    auto view = convert_(o);
    if (!view) {
      ++conversion_errors_;
      return;
    }
    const std::string key = ObjectKeyOf(o);
    auto it = views_.find(key);
    if (it == views_.end()) {
      auto& stored = views_.emplace(key, std::move(*view)).first->second;
      if (handlers_.on_add) handlers_.on_add(stored);
    } else {
      View old_view = std::move(it->second);
      it->second = std::move(*view);
      if (handlers_.on_update) handlers_.on_update(old_view, it->second);
    }
  }

  Convert convert_;
  Handlers handlers_;
  std::map<std::string, View> views_;
  std::size_t conversion_errors_ = 0;
  Reflector reflector_;
};

}  // namespace hami::k8s
