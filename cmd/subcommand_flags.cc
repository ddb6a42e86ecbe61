#include "cmd/subcommand_flags.h"

#include <fmt/format.h>

#include <cctype>
#include <cxxopts.hpp>
#include <map>

namespace hami::cmd {
namespace {

// cxxopts reads every "-x..." longer than "-x" as a group of one-letter flags ("-v4" as -v -4,
// "-http_bind=x" as -h -t -t ...) and "--" as the end of the flags; an argument of either form is handed to
// it as a placeholder ("\x01<index>"), which it leaves alone (or takes as a flag's value), and is put back
// afterwards. An argument with the placeholder's mark anywhere in it is replaced too, so that what cxxopts
// hands back holds the mark only as a placeholder this call issued.
constexpr char kMark = '\x01';

bool NeedsPlaceholder(const std::string& arg) {
  if (arg == "--" || arg.find(kMark) != std::string::npos) return true;
  return arg.size() > 2 && arg[0] == '-' && std::isalnum(static_cast<unsigned char>(arg[1]));
}

// The argument a placeholder stands for ("\x01<index>" -> args[index]); any other text as it is.
std::string Restored(const std::string& text, const std::map<std::string, std::string>& placeholders) {
  auto it = placeholders.find(text);
  return it == placeholders.end() ? text : it->second;
}

// "--name" for "name" or "o,output".
std::string LongForm(const std::string& spec) {
  const auto comma = spec.find(',');
  return "--" + (comma == std::string::npos ? spec : spec.substr(comma + 1));
}

}  // namespace

Result<GivenArgs> SubcommandFlags::Parse(const std::vector<std::string>& args) const {
  cxxopts::Options options(command_);
  options.allow_unrecognised_options();
  auto add = options.add_options();
  for (const auto& spec : specs_) add(spec, "", cxxopts::value<std::string>());
  add("h,help", "");
  std::vector<std::string> argv_text{command_};
  std::map<std::string, std::string> placeholders;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const std::string placeholder = fmt::format("{}{}", kMark, i);
    const auto eq = arg.find('=');
    const auto mark = arg.find(kMark);
    if (arg.starts_with("--") && eq != std::string::npos && mark != std::string::npos && mark > eq) {
      // "--flag=<value with the mark>": only the value stands in.
      argv_text.push_back(arg.substr(0, eq + 1) + placeholder);
      placeholders.emplace(placeholder, arg.substr(eq + 1));
    } else if (NeedsPlaceholder(arg)) {
      argv_text.push_back(placeholder);
      placeholders.emplace(placeholder, arg);
    } else {
      argv_text.push_back(arg);
    }
  }
  std::vector<const char*> argv;
  for (const auto& a : argv_text) argv.push_back(a.c_str());
  try {
    const auto result = options.parse(static_cast<int>(argv.size()), argv.data());
    GivenArgs given;
    given.help = result.count("help") > 0;
    for (const auto& kv : result.arguments()) {
      if (kv.key() == "help") continue;
      given.flags.push_back(GivenFlag{kv.key(), Restored(kv.value(), placeholders)});
    }
    for (const auto& extra : result.unmatched()) given.undeclared.push_back(Restored(extra, placeholders));
    return given;
  } catch (const cxxopts::exceptions::missing_argument&) {
    // Thrown only for the last argument: a value flag with nothing after it.
    return Error{fmt::format("{} needs a value", args.back())};
  } catch (const cxxopts::exceptions::exception& e) {
    return Error{e.what()};
  }
}

Error SubcommandFlags::Unexpected(const std::string& arg) const {
  if (arg.size() < 2 || arg[0] != '-') return Error{fmt::format("unexpected argument '{}'", arg)};
  std::string expected;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (i > 0) expected += i + 1 == specs_.size() ? " or " : ", ";
    expected += LongForm(specs_[i]);
  }
  return Error{fmt::format("unknown flag '{}'; expected {}", arg.substr(0, arg.find('=')), expected)};
}

}  // namespace hami::cmd
