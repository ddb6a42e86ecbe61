#include "k8s/reflector.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <charconv>

#include "k8s/waits.h"

namespace hami::k8s {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {
const json::object* Metadata(const json::value& o) {
  if (!o.is_object()) return nullptr;
  const auto* md = o.get_object().if_contains("metadata");
  return md && md->is_object() ? &md->get_object() : nullptr;
}
std::string Field(const json::object* md, std::string_view key) {
  if (md == nullptr) return "";
  const auto* v = md->if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}
}  // namespace

std::string ObjectKeyOf(const json::value& object) {
  const auto* md = Metadata(object);
  const std::string ns = Field(md, "namespace");
  const std::string name = Field(md, "name");
  return ns.empty() ? name : ns + "/" + name;
}

std::string ResourceVersionOf(const json::value& object) {
  return Field(Metadata(object), "resourceVersion");
}

bool LaterOrSame(const std::string& rv, const std::string& reference) {
  if (rv == reference) return true;
  std::uint64_t a = 0, b = 0;
  const auto pa = std::from_chars(rv.data(), rv.data() + rv.size(), a);
  const auto pb = std::from_chars(reference.data(), reference.data() + reference.size(), b);
  return pa.ec == std::errc() && pb.ec == std::errc() && a > b;
}

Reflector::Reflector(ApiClient& client, Options options, Handlers handlers)
    : client_(&client),
      options_(std::move(options)),
      handlers_(std::move(handlers)),
      rng_(std::random_device{}()) {}

json::value Reflector::Keep(json::value object) const {
  if (options_.keep_objects) return object;
  json::object md;
  if (const auto* m = Metadata(object)) {
    for (const char* key : {"name", "namespace", "resourceVersion"}) {
      if (const auto* v = m->if_contains(key)) md[key] = *v;
    }
  }
  return json::object{{"metadata", std::move(md)}};
}

asio::awaitable<ApiResult<void>> Reflector::ListAll(const std::string& rv) {
  // Handlers see each object as its page arrives, so only one page of full objects is in memory at a time.
  // What was known before and is not listed now vanished while we were not watching: a delete.
  std::map<std::string, json::value> next;
  std::string token;
  std::string list_rv;
  do {
    ListOptions o;
    o.label_selector = options_.label_selector;
    o.field_selector = options_.field_selector;
    o.limit = options_.page_size;
    o.continue_token = token;
    if (token.empty()) o.resource_version = rv;
    auto page = co_await client_->List(options_.path, o);
    if (!page) co_return page.error();
    if (list_rv.empty()) list_rv = page->resource_version;
    if (auto* items = page->list.is_object() ? page->list.get_object().if_contains("items") : nullptr;
        items && items->is_array()) {
      for (auto& item : items->get_array()) {
        std::string key = ObjectKeyOf(item);
        auto known = items_.find(key);
        if (known == items_.end()) {
          if (handlers_.on_add) handlers_.on_add(item);
        } else if (ResourceVersionOf(known->second) != ResourceVersionOf(item)) {
          if (handlers_.on_update) handlers_.on_update(known->second, item);
        }
        next.insert_or_assign(std::move(key), Keep(std::move(item)));
      }
    }
    token = page->continue_token;
  } while (!token.empty());
  ++stats_.lists;
  for (auto& [key, old] : items_) {
    if (!next.contains(key) && handlers_.on_delete) handlers_.on_delete(old);
  }
  items_ = std::move(next);
  rv_ = list_rv;
  synced_ = true;
  if (handlers_.on_synced) handlers_.on_synced();
  co_return ApiResult<void>{};
}

void Reflector::Apply(WatchEvent&& ev) {
  ++stats_.events;
  const std::string rv = ResourceVersionOf(ev.object);
  if (ev.type == "BOOKMARK") {
    if (!rv.empty()) rv_ = rv;
    return;
  }
  const std::string key = ObjectKeyOf(ev.object);
  if (ev.type == "ADDED" || ev.type == "MODIFIED") {
    auto it = items_.find(key);
    if (it == items_.end()) {
      if (handlers_.on_add) handlers_.on_add(ev.object);
      items_.emplace(key, Keep(std::move(ev.object)));
    } else {
      if (handlers_.on_update) handlers_.on_update(it->second, ev.object);
      it->second = Keep(std::move(ev.object));
    }
  } else if (ev.type == "DELETED") {
    auto it = items_.find(key);
    if (it != items_.end()) {
      items_.erase(it);
      if (handlers_.on_delete) handlers_.on_delete(ev.object);
    }
  }
  if (!rv.empty()) rv_ = rv;
}

asio::awaitable<void> Reflector::Run() {
  int failures = 0;
  std::string list_from = "0";  // the first list may come from the watch cache
  for (;;) {
    auto listed = co_await ListAll(list_from);
    if (!listed) {
      ++stats_.errors;
      if (listed.error().kind == ApiErrorKind::kGone) {
        ++stats_.expired;
        list_from = "";  // the version we had is gone too: ask for the most recent state
        continue;
      }
      // Not `Backoff(failures++, ...)` inside co_await: clang 16 sees two modifications there
      // (-Wunsequenced).
      const auto delay = Backoff(failures++, options_.backoff_initial, options_.backoff_max, rng_);
      co_await SleepFor(delay);
      continue;
    }
    for (;;) {
      std::uniform_int_distribution<std::int64_t> pick(options_.min_watch_timeout.count(),
                                                       options_.max_watch_timeout.count());
      WatchOptions w;
      w.resource_version = rv_;
      w.label_selector = options_.label_selector;
      w.field_selector = options_.field_selector;
      w.timeout = std::chrono::seconds(pick(rng_));
      ++stats_.watches;
      const auto started = std::chrono::steady_clock::now();
      const std::function<void(WatchEvent&&)> apply = [this](WatchEvent&& ev) { Apply(std::move(ev)); };
      auto watched = co_await client_->Watch(options_.path, w, apply);
      if (std::chrono::steady_clock::now() - started > std::chrono::minutes(2)) failures = 0;
      if (watched) {
        failures = 0;
        continue;  // the server ended the watch at its timeout: resume from the last version
      }
      ++stats_.errors;
      const ApiErrorKind kind = watched.error().kind;
      if (kind == ApiErrorKind::kGone) {
        ++stats_.expired;
        break;  // relist from the last version we saw
      }
      const auto delay = Backoff(failures++, options_.backoff_initial, options_.backoff_max, rng_);
      co_await SleepFor(delay);
      if (kind == ApiErrorKind::kTransport || kind == ApiErrorKind::kTooManyRequests ||
          kind == ApiErrorKind::kServer) {
        continue;  // the server is busy or unreachable: re-watch without relisting
      }
      break;
    }
    list_from = rv_;
  }
}

}  // namespace hami::k8s
