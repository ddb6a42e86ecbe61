#pragma once
// The admission decision for a pod being created (reference/hami-scheduler.md §9), free of the wire: the
// webhook (extender/admission_service) parses the AdmissionReview, calls AdmitPod on the pod, and turns the
// pod's changes into a JSON patch.
//
// Order: no containers -> denied; a pod of another scheduler -> allowed untouched; every backend's Admit on
// every container (init containers first); a value no backend can read (PROTOCOL.md D7) -> denied; a
// privileged container in a pod using devices -> denied; schedulerName set (and a pod with nodeName
// denied); every backend's ResourceQuota check (init peak against the app containers' sum).
#include <string>

#include "core/backend.h"
#include "core/model.h"
#include "core/quota.h"

namespace hami {

struct AdmissionOptions {
  std::string scheduler_name;  // --scheduler-name: written on pods using devices ("" = not)
  bool force_overwrite_default_scheduler = true;  // pods naming default-scheduler are ours too
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

  bool allowed() const { return kind != Kind::kDenied; }
};

// Decides on `pod` and applies the mutations to it in place (containers' limits and env, schedulerName,
// runtimeClassName, annotations). `quotas` is the namespace accounting the filter also uses.
AdmissionVerdict AdmitPod(PodView& pod, const Backends& backends, const QuotaBook& quotas,
                          const AdmissionOptions& options);

}  // namespace hami
