#include "core/reason.h"

namespace hami {

std::string_view ReasonName(Reason r) {
  switch (r) {
    case Reason::kAllocatedCardsInsufficientRequest:
      return "AllocatedCardsInsufficientRequest";
    case Reason::kCardAppClassMismatch:
      return "CardAppClassMismatch";
    case Reason::kCardComputeUnitsExhausted:
      return "CardComputeUnitsExhausted";
    case Reason::kCardCordoned:
      return "CardCordoned";
    case Reason::kCardInsufficientCore:
      return "CardInsufficientCore";
    case Reason::kCardInsufficientMemory:
      return "CardInsufficientMemory";
    case Reason::kCardMigTopologyInfeasible:
      return "CardMigTopologyInfeasible";
    case Reason::kCardNotFoundCustomFilterRule:
      return "CardNotFoundCustomFilterRule";
    case Reason::kCardNotHealth:
      return "CardNotHealth";
    case Reason::kCardQosPolicyMismatch:
      return "CardQosPolicyMismatch";
    case Reason::kCardSizeMismatch:
      return "CardSizeMismatch";
    case Reason::kCardTimeSlicingExhausted:
      return "CardTimeSlicingExhausted";
    case Reason::kCardTypeMismatch:
      return "CardTypeMismatch";
    case Reason::kCardUnhealthy:
      return "CardUnhealthy";
    case Reason::kCardUuidMismatch:
      return "CardUuidMismatch";
    case Reason::kExclusiveDeviceAllocateConflict:
      return "ExclusiveDeviceAllocateConflict";
    case Reason::kModeNotFit:
      return "ModeNotFit";
    case Reason::kNumaNotFit:
      return "NumaNotFit";
    case Reason::kResourceQuotaNotFit:
      return "ResourceQuotaNotFit";
    case Reason::kCount:
      break;
  }
  return "Unknown";
}

}  // namespace hami
