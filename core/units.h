#pragma once
// Strong units: device memory in MiB and compute in core percent (100 == one whole device on most vendors).
// Mixing them does not compile.
#include <compare>
#include <cstdint>

namespace hami {

template <class Tag, class Rep = std::int64_t>
class Amount {
 public:
  constexpr Amount() = default;
  constexpr explicit Amount(Rep v) noexcept : v_(v) {}
  constexpr Rep value() const noexcept { return v_; }
  friend constexpr auto operator<=>(const Amount&, const Amount&) = default;
  friend constexpr Amount operator+(Amount a, Amount b) noexcept { return Amount(a.v_ + b.v_); }
  friend constexpr Amount operator-(Amount a, Amount b) noexcept { return Amount(a.v_ - b.v_); }
  constexpr Amount& operator+=(Amount o) noexcept {
    v_ += o.v_;
    return *this;
  }
  constexpr Amount& operator-=(Amount o) noexcept {
    v_ -= o.v_;
    return *this;
  }

 private:
  Rep v_{};
};

using MiB = Amount<struct MiBTag>;
using Cores = Amount<struct CoresTag>;

constexpr MiB operator""_MiB(unsigned long long v) { return MiB(static_cast<std::int64_t>(v)); }
constexpr Cores operator""_cores(unsigned long long v) { return Cores(static_cast<std::int64_t>(v)); }

static_assert(!std::is_convertible_v<Cores, MiB>);

}  // namespace hami
