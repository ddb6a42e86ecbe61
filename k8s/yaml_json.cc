#include "k8s/yaml_json.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>

namespace hami::k8s {
namespace json = boost::json;
namespace {

json::value Scalar(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return json::value(s);  // quoted: always a string
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  {
    std::int64_t v = 0;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data() + (s[0] == '+' ? 1 : 0), end, v);
    if (ec == std::errc() && p == end) return v;
  }
  {
    double d = 0;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, d);
    const bool looks_numeric = s.find_first_not_of("0123456789.eE+-") == std::string::npos;
    if (looks_numeric && ec == std::errc() && p == end) return d;
  }
  return json::value(s);
}

// The offset of the first byte that is not well-formed UTF-8 or is a control character YAML does not allow
// (all of C0 but tab, LF and CR, and DEL), if any. yaml-cpp takes a stream starting with NULs for UTF-16/32.
std::optional<std::size_t> UnreadableAt(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) return i;
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and values past U+10FFFF.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return i;
    }
    i += len;
  }
  return std::nullopt;
}

// What one conversion may build: aliases make a small text expand to any size (an alias bomb), or to an
// endless tree (an alias of its own parent).
struct Budget {
  std::string_view source;
  std::size_t left;  // in bytes: scalar lengths plus one per node
  std::size_t limit;
};

Error TooDeep(const YAML::Node& n, std::string_view source) {
  return Error{fmt::format("{}:{}: YAML nested deeper than {} levels (an alias of its own parent?)", source,
                           n.Mark().line + 1, kYamlMaxDepth)};
}

// yaml-cpp 0.7 loops forever (allocating) on a quoted scalar outside any collection followed by ',' (`"a",`,
// `- 1\n"b",`, `!t 'a' ,`; found by tests/fuzz/fuzz_yaml). That is never valid YAML: find it first. Returns
// the line (1-based) of such a ','. Tracks flow depth so that `[\n"a",\n"b"]` is left alone.
std::optional<std::size_t> CommaAfterTopLevelQuote(std::string_view s) {
  int flow = 0;
  std::size_t line = 1;
  bool line_start = true;  // only blanks, `---`, tags and anchors so far on this line
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      continue;
    }
    if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t' || s[i - 1] == '\n')) {
      while (i + 1 < s.size() && s[i + 1] != '\n') ++i;  // a comment
      continue;
    }
    if (c == '"' || c == '\'') {
      const bool top = flow == 0 && line_start;
      // The end of the quoted scalar: '\' escapes in double quotes, '' is a quote in single ones.
      std::size_t j = i + 1;
      for (; j < s.size(); ++j) {
        if (s[j] == '\n') ++line;
        if (c == '"' && s[j] == '\\') {
          ++j;
        } else if (s[j] == c) {
          if (c == '\'' && j + 1 < s.size() && s[j + 1] == '\'') {
            ++j;
          } else {
            break;
          }
        }
      }
      i = j;
      line_start = false;
      if (!top) continue;
      std::size_t k = j + 1, at = line;
      while (k < s.size() && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r' || s[k] == '\n'))
        at += s[k++] == '\n';
      if (k < s.size() && s[k] == ',') return at;
      continue;
    }
    if (c == '[' || c == '{') ++flow;
    if ((c == ']' || c == '}') && flow > 0) --flow;
    if (line_start && (c == ' ' || c == '\t' || c == '\r')) continue;
    if (line_start && (c == '!' || c == '&' || c == '-')) {
      // A tag, an anchor or `---` before the node: skip the word, stay at the line's start.
      while (i + 1 < s.size() && s[i + 1] != ' ' && s[i + 1] != '\n') ++i;
      continue;
    }
    line_start = false;
  }
  return std::nullopt;
}

Result<json::value> Convert(const YAML::Node& n, Budget& budget, int depth) {
  const std::string_view source = budget.source;
  if (depth > kYamlMaxDepth) return TooDeep(n, source);
  const std::size_t cost = 1 + (n.IsScalar() ? n.Scalar().size() : 0);
  if (cost > budget.left) {
    return Error{fmt::format(
        "{}:{}: YAML expands to more than {} bytes (its aliases repeat too much: the limit "
        "is {} times the text plus {} MiB)",
        source, n.Mark().line + 1, budget.limit, kYamlExpansionFactor, kYamlExpansionSlack >> 20)};
  }
  budget.left -= cost;
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return json::value(nullptr);
    case YAML::NodeType::Scalar:
      return Scalar(n);
    case YAML::NodeType::Sequence: {
      json::array a;
      for (const auto& item : n) {
        auto v = Convert(item, budget, depth + 1);
        if (!v) return v;
        a.push_back(std::move(*v));
      }
      return json::value(std::move(a));
    }
    case YAML::NodeType::Map: {
      json::object o;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) {
          return Error{
              fmt::format("{}:{}: mapping keys must be plain strings", source, kv.first.Mark().line + 1)};
        }
        // Keys are copied too: an alias of a map with long keys must pay for them.
        if (kv.first.Scalar().size() > budget.left) {
          return Error{fmt::format("{}:{}: YAML expands to more than {} bytes (its aliases repeat too much)",
                                   source, kv.first.Mark().line + 1, budget.limit)};
        }
        budget.left -= kv.first.Scalar().size();
        auto v = Convert(kv.second, budget, depth + 1);
        if (!v) return v;
        o[kv.first.Scalar()] = std::move(*v);
      }
      return json::value(std::move(o));
    }
  }
  return json::value(nullptr);
}

}  // namespace

Result<std::vector<json::value>> YamlToJson(std::string_view text, std::string_view source) {
  // yaml-cpp passes bytes through: invalid UTF-8 would become JSON strings that no JSON reader accepts.
  if (auto bad = UnreadableAt(text)) {
    return Error{
        fmt::format("{}: not valid YAML or JSON: invalid UTF-8 or a control character at byte {} "
                    "(want UTF-8 text)",
                    source, *bad)};
  }
  if (auto line = CommaAfterTopLevelQuote(text)) {
    return Error{fmt::format("{}:{}: not valid YAML or JSON: ',' after a quoted scalar outside a list or map",
                             source, *line)};
  }
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    return Error{fmt::format("{}:{}: YAML nested deeper than {} levels", source, e.mark.line + 1, e.depth())};
  } catch (const YAML::Exception& e) {
    return Error{fmt::format("{}:{}: not valid YAML or JSON: {}", source, e.mark.line + 1, e.msg)};
  }
  std::vector<json::value> out;
  const std::size_t limit = text.size() * kYamlExpansionFactor + kYamlExpansionSlack;
  Budget budget{source, limit, limit};  // shared by all documents of the stream
  for (const auto& d : docs) {
    if (d.IsNull()) continue;
    auto v = Convert(d, budget, 1);
    if (!v) return v.error();
    if (v->is_null()) continue;  // an empty document, tagged or not, is no object either
    out.push_back(std::move(*v));
  }
  return out;
}

}  // namespace hami::k8s
