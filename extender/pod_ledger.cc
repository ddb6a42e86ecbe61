#include "extender/pod_ledger.h"

#include "extender/ledger_feed.h"

namespace hami::extender {

PodLedger::Phase PodLedger::PhaseOf(const std::string& uid) const {
  auto it = records_.find(uid);
  if (it == records_.end()) return Phase::kNone;
  if (!it->second.bound_to.empty()) return Phase::kBound;
  if (!it->second.binding.empty()) return Phase::kBinding;
  return it->second.reservation ? Phase::kReserved : Phase::kNone;
}

void PodLedger::Reserve(PodAllocation charge, Reservation r) {
  const std::string uid = charge.uid;
  feed_->state().AddPod(std::move(charge));
  records_[uid].reservation = std::move(r);
}

const Reservation* PodLedger::HeldFor(const std::string& uid, const std::string& key) const {
  const Reservation* r = FindReservation(uid);
  const PodAllocation* charged = feed_->state().FindPod(uid);
  if (r == nullptr || charged == nullptr || r->key != key || charged->node != r->node ||
      charged->ns + "/" + charged->name != key)
    return nullptr;
  return r;
}

std::optional<std::string> PodLedger::OtherHolder(const std::string& uid, const std::string& key) const {
  if (const PodAllocation* held = feed_->state().FindPod(uid); held != nullptr) {
    std::string holder = held->ns + "/" + held->name;
    if (holder != key) return holder;
  }
  if (const Reservation* r = FindReservation(uid); r != nullptr && r->key != key) return r->key;
  return std::nullopt;
}

bool PodLedger::Holds(const std::string& uid) const {
  return FindReservation(uid) != nullptr || feed_->state().FindPod(uid) != nullptr;
}

const Reservation* PodLedger::FindReservation(const std::string& uid) const {
  auto it = records_.find(uid);
  return it == records_.end() || !it->second.reservation ? nullptr : &*it->second.reservation;
}

void PodLedger::DropReservation(const std::string& uid) {
  auto it = records_.find(uid);
  if (it == records_.end()) return;
  it->second.reservation.reset();
  EraseIfEmpty(it);
}

void PodLedger::Redecide(const std::string& uid) {
  feed_->state().RemovePod(uid);
  DropReservation(uid);
}

bool PodLedger::BeginBind(const std::string& key, const std::string& uid) {
  Record& r = records_[uid];
  if (!r.binding.empty()) return false;
  r.binding = key;
  ++binding_keys_[key];
  ++binds_running_;
  return true;
}

void PodLedger::EndBind(const std::string& uid) {
  auto it = records_.find(uid);
  if (it == records_.end() || it->second.binding.empty()) return;
  if (auto k = binding_keys_.find(it->second.binding); k != binding_keys_.end() && --k->second == 0)
    binding_keys_.erase(k);
  --binds_running_;
  it->second.binding.clear();
  EraseIfEmpty(it);
}

bool PodLedger::Binding(const std::string& key, const std::string& uid) const {
  auto it = records_.find(uid);
  return it != records_.end() && it->second.binding == key && !key.empty();
}

void PodLedger::MarkBound(const std::string& uid, const std::string& node) { records_[uid].bound_to = node; }

const std::string* PodLedger::BoundTo(const std::string& uid) const {
  auto it = records_.find(uid);
  return it == records_.end() || it->second.bound_to.empty() ? nullptr : &it->second.bound_to;
}

void PodLedger::ShownBound(const std::string& uid) {
  auto it = records_.find(uid);
  if (it == records_.end()) return;
  it->second.bound_to.clear();
  EraseIfEmpty(it);
}

TimePoint PodLedger::FirstSeenUndated(const std::string& uid, TimePoint now) {
  Record& r = records_[uid];
  if (!r.undated_since) r.undated_since = now;
  return *r.undated_since;
}

void PodLedger::Release(const std::string& uid) {
  feed_->Forget(uid);
  auto it = records_.find(uid);
  if (it == records_.end()) return;
  it->second.reservation.reset();
  it->second.undated_since.reset();
  EraseIfEmpty(it);
}

void PodLedger::Gone(const std::string& uid) {
  Release(uid);
  ShownBound(uid);
}

PodLedger::Records::iterator PodLedger::EraseIfEmpty(Records::iterator it) {
  return it->second.empty() ? records_.erase(it) : std::next(it);
}

}  // namespace hami::extender
