#pragma once
// The admission decision for a pod being created (HAMi's rules, in its order, below), free of the wire: the
// webhook (extender/admission_service) parses the AdmissionReview, calls AdmitPod on the pod, and turns the
// pod's changes into a JSON patch.
//
// First, on every pod: allocation annotations (hami.io/vgpu-node, bind-phase, every backend's allocated and
// to-allocate keys) are removed, as only the scheduler writes them, after creation. Then HAMi's order: no
// containers -> denied; a pod of another scheduler -> allowed (with only the strip above); every backend's
// Admit on every container (init containers first); a value no backend can read (docs/DECISIONS.md, D7) ->
// denied; a privileged container in a pod using devices -> denied; schedulerName set (and a pod with nodeName
// denied); every backend's ResourceQuota check (init peak against the app containers' sum).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/model.h"
#include "core/quota.h"

namespace hami {

struct AdmissionOptions {
  std::string scheduler_name;  // --scheduler-name: written on pods using devices ("" = not)
  bool force_overwrite_default_scheduler = true;  // pods naming default-scheduler are ours too
};

// What a pod admitted by the rules takes from one backend's namespace quota (init peak vs app sum).
struct QuotaDemand {
  std::size_t backend = 0;  // index into Backends
  std::int64_t memory = 0, cores = 0;
};

struct AdmissionVerdict {
  enum class Kind {
    kAllowed,  // admitted; `pod` holds the changes (none when nothing applied)
    kSkipped,  // another scheduler's pod: admitted untouched
    kDenied,   // refused: `code` 403 for a rule (privileged, nodeName, quota), 400 for an unreadable value
  };
  Kind kind = Kind::kAllowed;
  int code = 200;
  std::string message;
  bool uses_devices = false;  // some container asks for a backend's resources
  std::vector<QuotaDemand> quota;     // admitted by the rules: what the quota check must allow

  bool allowed() const { return kind != Kind::kDenied; }
};

// Decides on `pod` and applies the mutations to it in place (containers' limits and env, schedulerName,
// runtimeClassName, annotations). `quotas` is the namespace accounting the filter also uses.
AdmissionVerdict AdmitPod(PodView& pod, const Backends& backends, const QuotaBook& quotas,
                          const AdmissionOptions& options);
// AdmitPod in two steps, for a caller that runs the rules where the ledger is not (the webhook's worker
// thread): every rule but the quota, which reads nothing but the pod, the backends and the options; then the
// quota check of what the rules admitted (a denial, or nothing).
AdmissionVerdict AdmitPodRules(PodView& pod, const Backends& backends, const AdmissionOptions& options);
std::optional<AdmissionVerdict> QuotaDenial(const std::string& ns, const AdmissionVerdict& admitted,
                                            const Backends& backends, const QuotaBook& quotas);

}  // namespace hami
