#pragma once
// Why a card cannot take a request: upstream's reason names (a refusal lists them per card count), plus
// CardSizeMismatch (ours): the card is shared by slices of another size only. CardAppClassMismatch,
// CardQosPolicyMismatch and CardUnhealthy are one vendor's own names.
#include <cstdint>
#include <string_view>

namespace hami {

enum class Reason : std::uint8_t {
  kAllocatedCardsInsufficientRequest,
  kCardAppClassMismatch,
  kCardComputeUnitsExhausted,
  kCardCordoned,
  kCardInsufficientCore,
  kCardInsufficientMemory,
  kCardMigTopologyInfeasible,
  kCardNotFoundCustomFilterRule,
  kCardNotHealth,
  kCardQosPolicyMismatch,
  kCardSizeMismatch,
  kCardTimeSlicingExhausted,
  kCardTypeMismatch,
  kCardUnhealthy,
  kCardUuidMismatch,
  kExclusiveDeviceAllocateConflict,
  kModeNotFit,
  kNumaNotFit,
  kResourceQuotaNotFit,
  kCount
};
std::string_view ReasonName(Reason r);

}  // namespace hami
