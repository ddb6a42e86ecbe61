#include "k8s/events.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/codec/stamps.h"

namespace hami::k8s {
namespace asio = boost::asio;
namespace json = boost::json;

InvolvedObject InvolvedObject::Of(const PodView& pod) {
  return {"Pod", pod.ns.empty() ? "default" : pod.ns, pod.name, pod.uid, pod.resource_version};
}

InvolvedObject InvolvedObject::Of(const NodeView& node) {
  return {"Node", "", node.name, node.uid, node.resource_version};
}

json::object MakeEvent(const InvolvedObject& object, std::string_view type, std::string_view reason,
                       std::string_view message, const EventRecorderOptions& options, TimePoint now) {
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::string ns = object.EventNamespace();
  const std::string stamp = codec::FormatRfc3339(now);
  json::object e;
  e["apiVersion"] = "v1";
  e["kind"] = "Event";
  e["metadata"] = {{"name", fmt::format("{}.{:x}", object.name, nanos)}, {"namespace", ns}};
  json::object involved{{"kind", object.kind}, {"name", object.name}, {"apiVersion", "v1"}};
  if (!object.ns.empty()) involved["namespace"] = object.ns;
  if (!object.uid.empty()) involved["uid"] = object.uid;
  if (!object.resource_version.empty()) involved["resourceVersion"] = object.resource_version;
  e["involvedObject"] = std::move(involved);
  e["reason"] = reason;
  e["message"] = message;
  json::object source{{"component", options.component}};
  if (!options.host.empty()) source["host"] = options.host;
  e["source"] = std::move(source);
  e["reportingComponent"] = options.component;
  e["reportingInstance"] = options.host;
  e["firstTimestamp"] = stamp;
  e["lastTimestamp"] = stamp;
  e["count"] = 1;
  e["type"] = type;
  return e;
}

EventRecorder::EventRecorder(asio::any_io_executor executor, ApiClient& client, const Clock& clock,
                             EventRecorderOptions options)
    : executor_(std::move(executor)), client_(&client), clock_(&clock), options_(std::move(options)) {}

void EventRecorder::Record(const InvolvedObject& object, std::string_view type, std::string_view reason,
                           std::string message) {
  if (stopped_) return;
  if (queue_.size() >= options_.max_queued) {
    ++stats_.dropped;
    return;
  }
  Pending p;
  p.ns = object.EventNamespace();
  p.key = fmt::format("{}/{}/{}/{}\x1f{}\x1f{}\x1f{}", object.kind, p.ns, object.name, object.uid, type,
                      reason, message);
  p.event = MakeEvent(object, type, reason, message, options_, clock_->Now());
  queue_.push_back(std::move(p));
  if (senders_ < options_.max_in_flight && senders_ < queue_.size()) {
    ++senders_;
    asio::co_spawn(executor_, Drain(), asio::detached);
  }
}

asio::awaitable<void> EventRecorder::Drain() {
  while (!queue_.empty()) {
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    try {
      co_await Send(p);
    } catch (const std::exception& e) {
      ++stats_.failed;
      spdlog::warn("event for {}: {}", p.key.substr(0, p.key.find('\x1f')), e.what());
    }
  }
  --senders_;
}

asio::awaitable<void> EventRecorder::Send(Pending& p) {
  const TimePoint now = clock_->Now();
  // Forget what is too old to aggregate with, and keep the table bounded. Nothing here is held across an
  // await: other senders change the table meanwhile.
  std::erase_if(recent_, [&](const auto& kv) { return now - kv.second.last >= options_.aggregate_window; });
  if (recent_.size() > 4096) recent_.clear();
  if (auto it = recent_.find(p.key); it != recent_.end()) {
    const std::string name = it->second.name;
    const std::int64_t count = it->second.count + 1;
    it->second.count = count;  // claimed now, so a concurrent sender of the same event counts on from here
    it->second.last = now;
    const json::value patch = {{"count", count}, {"lastTimestamp", codec::FormatRfc3339(now)}};
    const std::string path = PathFor("v1", "events", p.ns, name);
    auto r = co_await client_->MergePatch(path, patch);
    if (r) {
      ++stats_.aggregated;
      co_return;
    }
    // The earlier event is gone (expired by the API server's TTL): create a new one.
    if (auto again = recent_.find(p.key); again != recent_.end() && again->second.name == name)
      recent_.erase(again);
  }
  const std::string path = PathFor("v1", "events", p.ns);
  const json::value body = p.event;
  auto r = co_await client_->Create(path, body);
  if (!r) {
    ++stats_.failed;
    spdlog::warn("could not record event {} on {}/{}: {}", p.event["reason"].as_string().c_str(), p.ns,
                 p.event["involvedObject"].as_object().at("name").as_string().c_str(), r.error().message);
    co_return;
  }
  ++stats_.created;
  recent_[p.key] = Sent{std::string(p.event["metadata"].as_object().at("name").as_string()), 1, now, now};
}

}  // namespace hami::k8s
