#pragma once
// The reservation timeout: a decision our filter made that no Binding wrote is freed after
// --reservation-timeout, and so is an allocation another scheduler (HAMi's filter writes the pod before its
// bind) or an earlier run left on a pod that never got a node. Part of the leader's sweep (Housekeeping).
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/clock.h"
#include "core/model.h"
#include "extender/cluster_writer.h"
#include "extender/pod_ledger.h"

namespace hami::extender {

class ReservationExpiry {
 public:
  ReservationExpiry(PodLedger& ledger, ClusterWriter& writer, const Backends& backends, const Clock& clock,
                    std::chrono::seconds timeout);

  struct Due {
    std::string uid, ns, name, resource_version;
  };
  // Releases our reservations older than the timeout (unless a bind is using them), and returns the pods of
  // the cache `pods` whose written allocation is older than the timeout without spec.nodeName.
  std::vector<Due> Expire(const std::map<std::string, PodView>& pods);
  // Removes the allocation annotations of each due pod with a compare-and-swap patch (a re-filter or a bind
  // that wrote the pod since wins) and releases it unless our filter reserved it meanwhile.
  boost::asio::awaitable<void> Clear(const std::vector<Due>& due);

  std::size_t expired() const { return expired_; }

 private:
  PodLedger* ledger_;
  ClusterWriter* writer_;
  const Backends* backends_;
  const Clock* clock_;
  std::chrono::seconds timeout_;
  std::size_t expired_ = 0;
};

}  // namespace hami::extender
