#pragma once
// Log records are one line each: values from outside (pod and node names, annotation values, request
// bodies) can carry CR/LF and would otherwise forge log lines. Escaping is done once, in the formatter every
// sink uses, so no call site has to remember it.
#include <spdlog/formatter.h>

#include <memory>
#include <string>
#include <string_view>

namespace hami::k8s {

// `s` with C0 controls and DEL written as \r, \n, \t or \xNN, and the Unicode line breaks NEL, LS and PS
// as \u0085, \u2028, \u2029; everything else (a backslash included) unchanged.
std::string EscapeControlChars(std::string_view s);

// Formats like `inner` (spdlog's default pattern when null) with the message escaped as above.
class EscapingFormatter final : public spdlog::formatter {
 public:
  explicit EscapingFormatter(std::unique_ptr<spdlog::formatter> inner = nullptr);
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;

 private:
  std::unique_ptr<spdlog::formatter> inner_;
};

// Installs EscapingFormatter on every registered logger (the default one included) and on those created
// later through spdlog's registry. Idempotent. Called by cmd::Run before any subcommand logs; a later
// spdlog::set_pattern would undo it, so patterns go through EscapingFormatter's `inner` instead.
void InstallLogEscaping();

}  // namespace hami::k8s
