#pragma once
// Pod events (core/v1), as kube-scheduler's users read them with `kubectl describe pod`. Recording never
// blocks the caller: events are queued (at most `max_queued`; the excess is counted and dropped) and one
// sender coroutine posts them in order. Like client-go's recorder, an event identical to one sent in the
// last 10 minutes (same pod, type, reason and message) bumps that event's count instead of creating another.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/model.h"
#include "k8s/api_client.h"

namespace hami::k8s {

struct EventRecorderOptions {
  std::string component = "hami-scheduler";  // source.component and reportingComponent
  std::string host;                          // source.host and reportingInstance
  std::size_t max_queued = 1000;
  std::size_t max_in_flight = 4;  // events posted concurrently (one at a time falls behind a busy scheduler)
  std::chrono::seconds aggregate_window{600};
};

// The object an event is about: a pod, or a node (cluster-scoped: its events live in "default", as
// kubelet's do).
struct InvolvedObject {
  std::string kind;  // "Pod" or "Node"
  std::string ns;    // "" for a node
  std::string name;
  std::string uid;
  std::string resource_version;
  static InvolvedObject Of(const PodView& pod);
  static InvolvedObject Of(const NodeView& node);
  // Where the event is created.
  std::string EventNamespace() const { return ns.empty() ? "default" : ns; }
};

// The core/v1 Event for `object` (name `<object>.<hex nanoseconds>`, as client-go names them).
boost::json::object MakeEvent(const InvolvedObject& object, std::string_view type, std::string_view reason,
                              std::string_view message, const EventRecorderOptions& options, TimePoint now);

class EventRecorder {
 public:
  EventRecorder(boost::asio::any_io_executor executor, ApiClient& client, const Clock& clock,
                EventRecorderOptions options);

  // Drops what is queued and every later Record() (the events being posted finish).
  void Stop() {
    queue_.clear();
    stopped_ = true;
  }

  // type: "Normal" or "Warning".
  void Record(const PodView& pod, std::string_view type, std::string_view reason, std::string message) {
    Record(InvolvedObject::Of(pod), type, reason, std::move(message));
  }
  void Record(const InvolvedObject& object, std::string_view type, std::string_view reason,
              std::string message);

  struct Stats {
    std::size_t created = 0;
    std::size_t aggregated = 0;  // sent as a count bump of an earlier event
    std::size_t dropped = 0;     // queue full
    std::size_t failed = 0;      // the API server refused or could not be reached
  };
  const Stats& stats() const { return stats_; }
  std::size_t queued() const { return queue_.size(); }
  // Events are being posted (the recorder must outlive this).
  bool busy() const { return senders_ > 0; }

 private:
  struct Pending {
    std::string ns;
    std::string key;  // aggregation key
    boost::json::object event;
  };
  struct Sent {
    std::string name;
    std::int64_t count = 1;
    TimePoint first;
    TimePoint last;
  };
  boost::asio::awaitable<void> Drain();
  boost::asio::awaitable<void> Send(Pending& p);

  boost::asio::any_io_executor executor_;
  ApiClient* client_;
  const Clock* clock_;
  EventRecorderOptions options_;
  std::deque<Pending> queue_;
  std::size_t senders_ = 0;  // Drain() coroutines running
  bool stopped_ = false;
  std::map<std::string, Sent> recent_;
  Stats stats_;
};

}  // namespace hami::k8s
