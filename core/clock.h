#pragma once
// Wall-clock source, injected everywhere time matters (handshake stamps, lock ages, decision times).
#include <chrono>

namespace hami {

using TimePoint = std::chrono::system_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::system_clock::now(); }
};

// Time moves only when told to; for tests and offline simulation.
class FixedClock final : public Clock {
 public:
  explicit FixedClock(TimePoint t) : now_(t) {}
  TimePoint Now() const override { return now_; }
  void Advance(std::chrono::system_clock::duration d) { now_ += d; }
  void Set(TimePoint t) { now_ = t; }

 private:
  TimePoint now_;
};

}  // namespace hami
