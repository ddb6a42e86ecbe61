#pragma once
// Why a card cannot take a request: upstream's reason names (a refusal lists them per card count), plus
// CardSizeMismatch (ours): the card is shared by slices of another size only.
#include <cstdint>
#include <string_view>

namespace hami {

enum class Reason : std::uint8_t {
  kAllocatedCardsInsufficientRequest,
  kCardComputeUnitsExhausted,
  kCardCordoned,
  kCardInsufficientCore,
  kCardInsufficientMemory,
  kCardMigTopologyInfeasible,
  kCardNotFoundCustomFilterRule,
  kCardNotHealth,
  kCardSizeMismatch,
  kCardTimeSlicingExhausted,
  kCardTypeMismatch,
  kCardUuidMismatch,
  kExclusiveDeviceAllocateConflict,
  kModeNotFit,
  kNumaNotFit,
  kResourceQuotaNotFit,
  kCount
};
std::string_view ReasonName(Reason r);

}  // namespace hami
