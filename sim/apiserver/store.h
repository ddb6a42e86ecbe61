#pragma once
// The object store behind the in-memory API server: per-resource maps of JSON objects, one monotonic
// resourceVersion, a bounded event history for watch resume and exact-version lists, paged list snapshots,
// and watch subscriptions. Pure and synchronous: no I/O, no threads; the HTTP layer adapts it.
//
// Thread rule: not thread-safe; everything runs on the one io_context thread that owns the server.
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "sim/apiserver/errors.h"
#include "sim/apiserver/resources.h"
#include "sim/apiserver/selector.h"

namespace hami::sim {

// Stored objects are immutable once stored; an update stores a new object. Lists, snapshots, history and
// watch queues share them.
using ObjectPtr = std::shared_ptr<const boost::json::object>;

enum class EventType { kAdded, kModified, kDeleted, kBookmark, kError };
std::string_view ToString(EventType type);  // "ADDED", "MODIFIED", ...

struct WatchEvent {
  EventType type = EventType::kAdded;
  ObjectPtr
      object;  // the object; a Status for kError; {kind, apiVersion, metadata{resourceVersion}} for kBookmark
};

enum class PatchType { kJson, kMerge, kStrategicMerge };
enum class Subresource { kMain, kStatus };

struct StoreOptions {
  std::size_t history_limit = 10000;       // events kept for watch resume and exact-version lists
  std::chrono::seconds continue_ttl{300};  // a continue token older than this answers 410
  std::size_t max_snapshots = 256;         // paged lists in progress; the oldest is dropped first
  std::size_t watch_queue_limit = 100000;  // a watcher this far behind is closed (the client re-watches)
  bool auto_create_namespaces = true;      // creating into a missing namespace creates it (else 404)
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::int64_t limit = 0;  // 0: everything
  std::string continue_token;
  std::optional<std::string> resource_version;  // unset, "0", or an exact/minimum version
  std::string resource_version_match;           // "", "Exact" or "NotOlderThan"
};

struct ListResult {
  std::vector<ObjectPtr> items;
  std::uint64_t resource_version = 0;
  std::string continue_token;                   // empty on the last page
  std::optional<std::int64_t> remaining_items;  // set when continue_token is
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::optional<std::string> resource_version;  // unset or "0": synthetic ADDED for the current state first
  std::string resource_version_match;
  bool send_initial_events = false;  // streaming list: ADDED for the current state, then an
                                     // initial-events-end BOOKMARK
  bool allow_bookmarks = false;
};

struct WriteOptions {
  bool dry_run = false;  // validate and compute, but store nothing and notify no one
};

struct DeleteOptions {
  std::optional<std::string> uid;               // preconditions.uid
  std::optional<std::string> resource_version;  // preconditions.resourceVersion
  bool dry_run = false;
};

struct DeleteResult {
  ObjectPtr object;     // the final state (deleted) or the object now marked for deletion (finalizers)
  bool deleted = true;  // false: metadata.finalizers keep it until they are removed
};

// One watch subscription. The Store appends events as they happen; the reader drains them. Shared by the
// Store (weakly) and the reader; it ends when the reader drops it.
class Watcher {
 public:
  enum class End { kNone, kDropped, kOverflow };

  bool HasEvents() const { return !queue_.empty(); }
  WatchEvent Pop();
  // Called after events are appended, or the watch is dropped/closed, or a bookmark is requested.
  void SetNotify(std::function<void()> notify) { notify_ = std::move(notify); }
  End end() const { return end_; }
  bool bookmarks_allowed() const { return allow_bookmarks_; }
  // A bookmark was requested (test hook); the reader clears it when it sends one.
  bool TakeBookmarkRequest();
  // A BOOKMARK carrying `resource_version`.
  WatchEvent Bookmark(std::uint64_t resource_version) const;
  const ResourceType& type() const { return *type_; }
  std::size_t queued() const { return queue_.size(); }

 private:
  friend class Store;
  bool Matches(const boost::json::object& object) const;
  void Push(WatchEvent event, std::size_t limit);
  void Notify() const {
    if (notify_) notify_();
  }

  const ResourceType* type_ = nullptr;
  std::string namespace_;
  LabelSelector labels_;
  FieldSelector fields_;
  bool allow_bookmarks_ = false;
  bool bookmark_requested_ = false;
  End end_ = End::kNone;
  std::deque<WatchEvent> queue_;
  std::function<void()> notify_;
};

class Store {
 public:
  explicit Store(StoreOptions options = {}, const Clock* clock = nullptr);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // ---- The API verbs. `ns` is the namespace from the URL ("" for cluster-scoped types and all-namespace
  // lists/watches). Errors are what kube-apiserver would answer.

  // POST. Sets uid, creationTimestamp, resourceVersion, generation; honours metadata.generateName.
  ApiResult<ObjectPtr> Create(const ResourceType& type, std::string_view ns, boost::json::object object,
                              const WriteOptions& options = {});
  // GET. `resource_version` "0"/unset: current; other: not older than (504 if the store is not there yet).
  ApiResult<ObjectPtr> Get(const ResourceType& type, std::string_view ns, std::string_view name,
                           const std::optional<std::string>& resource_version = std::nullopt) const;
  // PUT. metadata.resourceVersion (if set) must match (else 409 Conflict). kMain ignores status changes of
  // types with a status subresource; kStatus changes only status.
  ApiResult<ObjectPtr> Update(const ResourceType& type, std::string_view ns, std::string_view name,
                              boost::json::object object, Subresource sub = Subresource::kMain,
                              const WriteOptions& options = {});
  // PATCH. A metadata.resourceVersion (or uid) that the patch sets and that differs from the stored one is a
  // precondition failure (409).
  ApiResult<ObjectPtr> Patch(const ResourceType& type, std::string_view ns, std::string_view name,
                             PatchType patch_type, const boost::json::value& patch,
                             Subresource sub = Subresource::kMain, const WriteOptions& options = {});
  // DELETE. Immediate unless metadata.finalizers is non-empty (then deletionTimestamp is set). Deleting a
  // namespace deletes everything in it.
  ApiResult<DeleteResult> Delete(const ResourceType& type, std::string_view ns, std::string_view name,
                                 const DeleteOptions& options = {});
  // POST pods/binding: sets spec.nodeName and the PodScheduled condition. 409 if the pod is already bound or
  // being deleted, or if metadata.uid / metadata.resourceVersion of the Binding do not match the pod.
  ApiResult<ObjectPtr> Bind(std::string_view ns, std::string_view pod, const boost::json::object& binding);
  ApiResult<ListResult> List(const ResourceType& type, std::string_view ns, const ListOptions& options);
  // WATCH. From an exact resourceVersion the history must still hold it (410 Expired otherwise).
  ApiResult<std::shared_ptr<Watcher>> Watch(const ResourceType& type, std::string_view ns,
                                            const WatchOptions& options);

  // ---- Convenience for seeding and assertions.

  // Creates an object of whatever kind its apiVersion/kind say (namespace from metadata, default "default").
  ApiResult<ObjectPtr> Create(boost::json::value object);
  // Loads the documents `simulate --cluster` accepts: Lists (any *List kind) and single objects. Server
  // fields (resourceVersion, uid, managedFields) are dropped. Objects of kinds not served are named in
  // `skipped`.
  Result<std::size_t> Load(const std::vector<boost::json::value>& documents,
                           std::vector<std::string>* skipped);
  // By plural/singular/short name/kind ("pods", "pod", "Pod"); nullptr if missing.
  ObjectPtr Find(std::string_view resource, std::string_view ns, std::string_view name) const;
  // Every object of a resource, ordered by namespace/name.
  std::vector<ObjectPtr> Objects(std::string_view resource) const;

  // ---- State and test hooks.

  std::uint64_t resource_version() const { return rv_; }
  // The oldest version a watch may still start from; older ones answer 410.
  std::uint64_t oldest_resource_version() const { return compacted_rv_; }
  // Forgets the whole event history and every continue token: any version older than the current one
  // answers 410 Expired from now on.
  void Compact();
  void ExpireContinueTokens();
  // Ends every open watch (the readers see Watcher::End::kDropped).
  void DropWatchers();
  // Asks every watch that allows bookmarks to send one now.
  void RequestBookmarks();
  TimePoint Now() const { return clock_->Now(); }

 private:
  struct History {
    EventType type;
    std::size_t resource;
    std::uint64_t rv;
    ObjectPtr object;  // after (for kDeleted: the final state, carrying the deletion's resourceVersion)
    ObjectPtr prev;    // before (null for kAdded)
  };
  struct Snapshot {
    std::uint64_t rv;
    std::vector<ObjectPtr> items;  // the rest of the list, after the page already served
    TimePoint created;
  };
  using Bucket = std::map<std::string, ObjectPtr, std::less<>>;  // "namespace/name" -> object

  const ObjectPtr* Lookup(const ResourceType& type, std::string_view ns, std::string_view name) const;
  ApiResult<std::string> ResolveNamespace(const ResourceType& type, std::string_view url_ns,
                                          boost::json::object& metadata, bool create_namespace);
  ApiResult<ObjectPtr> Commit(const ResourceType& type, const ObjectPtr& current, boost::json::object next,
                              const WriteOptions& options);
  ObjectPtr Remove(const ResourceType& type, const ObjectPtr& current);
  void Emit(EventType type, std::size_t resource, ObjectPtr object, ObjectPtr prev);
  Bucket StateAt(std::size_t resource, std::uint64_t rv) const;
  std::string NewUid();
  std::string GenerateName(std::string_view prefix);

  StoreOptions options_;
  SystemClock system_clock_;
  const Clock* clock_;
  std::vector<Bucket> buckets_;  // indexed by IndexOf(ResourceType)
  std::uint64_t rv_ = 1;
  std::uint64_t compacted_rv_ = 1;
  std::deque<History> history_;
  std::map<std::uint64_t, Snapshot> snapshots_;
  std::uint64_t next_snapshot_ = 1;
  std::map<std::uint64_t, std::weak_ptr<Watcher>> watchers_;
  std::uint64_t next_watcher_ = 1;
  std::mt19937_64 random_;
};

// {"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":..,"continue":..},"items":[...]}.
boost::json::object ListDocument(const ResourceType& type, const ListResult& list);

}  // namespace hami::sim
