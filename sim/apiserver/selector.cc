#include "sim/apiserver/selector.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <optional>

namespace hami::sim {
namespace json = boost::json;
namespace {

enum class Tok { kIdent, kNot, kEq, kDoubleEq, kNotEq, kOpen, kClose, kComma, kGt, kLt, kEnd };

struct Token {
  Tok kind;
  std::string text;
};

bool IsSpecial(char c) {
  return c == '!' || c == '=' || c == '<' || c == '>' || c == '(' || c == ')' || c == ',' || c == ' ' ||
         c == '\t';
}

std::vector<Token> Lex(std::string_view s) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t') {
      ++i;
    } else if (c == '!' && i + 1 < s.size() && s[i + 1] == '=') {
      out.push_back({Tok::kNotEq, "!="});
      i += 2;
    } else if (c == '!') {
      out.push_back({Tok::kNot, "!"});
      ++i;
    } else if (c == '=' && i + 1 < s.size() && s[i + 1] == '=') {
      out.push_back({Tok::kDoubleEq, "=="});
      i += 2;
    } else if (c == '=') {
      out.push_back({Tok::kEq, "="});
      ++i;
    } else if (c == '(') {
      out.push_back({Tok::kOpen, "("});
      ++i;
    } else if (c == ')') {
      out.push_back({Tok::kClose, ")"});
      ++i;
    } else if (c == ',') {
      out.push_back({Tok::kComma, ","});
      ++i;
    } else if (c == '>') {
      out.push_back({Tok::kGt, ">"});
      ++i;
    } else if (c == '<') {
      out.push_back({Tok::kLt, "<"});
      ++i;
    } else {
      std::size_t j = i;
      while (j < s.size() && !IsSpecial(s[j])) ++j;
      out.push_back({Tok::kIdent, std::string(s.substr(i, j - i))});
      i = j;
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

std::optional<std::int64_t> ToInt(std::string_view s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

const json::value* Lookup(const json::object& object, std::string_view path) {
  const json::object* cur = &object;
  const json::value* found = nullptr;
  while (!path.empty()) {
    if (!cur) return nullptr;
    const std::size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    found = cur->if_contains(part);
    if (!found) return nullptr;
    cur = found->if_object();
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return found;
}

}  // namespace

Result<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector sel;
  const std::vector<Token> toks = Lex(text);
  std::size_t i = 0;
  auto fail = [&](std::string_view what) {
    return Error{fmt::format("unable to parse requirement: labelSelector \"{}\": {} (found \"{}\")", text,
                             what, toks[i].text)};
  };
  if (toks[0].kind == Tok::kEnd) return sel;
  for (;;) {
    Requirement r;
    if (toks[i].kind == Tok::kNot) {
      ++i;
      if (toks[i].kind != Tok::kIdent) return fail("expected a label key after '!'");
      r.key = toks[i++].text;
      r.op = Op::kDoesNotExist;
    } else {
      if (toks[i].kind != Tok::kIdent) return fail("expected a label key");
      r.key = toks[i++].text;
      const Tok k = toks[i].kind;
      if (k == Tok::kComma || k == Tok::kEnd) {
        r.op = Op::kExists;
      } else if (k == Tok::kEq || k == Tok::kDoubleEq || k == Tok::kNotEq) {
        r.op = k == Tok::kNotEq ? Op::kNotEquals : Op::kEquals;
        ++i;
        if (toks[i].kind == Tok::kIdent) {
          r.values.push_back(toks[i++].text);
        } else if (toks[i].kind == Tok::kComma || toks[i].kind == Tok::kEnd) {
          r.values.emplace_back();
        } else {
          return fail("expected a label value");
        }
      } else if (k == Tok::kGt || k == Tok::kLt) {
        r.op = k == Tok::kGt ? Op::kGreaterThan : Op::kLessThan;
        ++i;
        if (toks[i].kind != Tok::kIdent || !ToInt(toks[i].text)) return fail("expected an integer");
        r.values.push_back(toks[i++].text);
      } else if (k == Tok::kIdent && (toks[i].text == "in" || toks[i].text == "notin")) {
        r.op = toks[i].text == "in" ? Op::kIn : Op::kNotIn;
        ++i;
        if (toks[i].kind != Tok::kOpen) return fail("expected '(' after in/notin");
        ++i;
        for (;;) {
          if (toks[i].kind == Tok::kIdent) {
            r.values.push_back(toks[i++].text);
          } else if (toks[i].kind == Tok::kComma || toks[i].kind == Tok::kClose) {
            r.values.emplace_back();  // an empty value, as in "a in (,x)"
          } else {
            return fail("expected a value or ')'");
          }
          if (toks[i].kind == Tok::kClose) {
            ++i;
            break;
          }
          if (toks[i].kind != Tok::kComma) return fail("expected ',' or ')'");
          ++i;
        }
      } else {
        return fail("expected =, ==, !=, in, notin, <, > or ','");
      }
    }
    sel.requirements_.push_back(std::move(r));
    if (toks[i].kind == Tok::kEnd) break;
    if (toks[i].kind != Tok::kComma) return fail("expected ','");
    ++i;
  }
  return sel;
}

bool LabelSelector::Matches(const json::object* labels) const {
  for (const auto& r : requirements_) {
    const json::value* v = labels ? labels->if_contains(r.key) : nullptr;
    const std::string_view value =
        v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
    const bool has = v && v->is_string();
    const auto in = [&] { return std::find(r.values.begin(), r.values.end(), value) != r.values.end(); };
    switch (r.op) {
      case Op::kEquals:
      case Op::kIn:
        if (!has || !in()) return false;
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        if (has && in()) return false;
        break;
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kDoesNotExist:
        if (has) return false;
        break;
      case Op::kGreaterThan:
      case Op::kLessThan: {
        auto have = has ? ToInt(value) : std::nullopt;
        auto want = ToInt(r.values.front());
        if (!have || !want) return false;
        if (r.op == Op::kGreaterThan ? !(*have > *want) : !(*have < *want)) return false;
        break;
      }
    }
  }
  return true;
}

Result<FieldSelector> FieldSelector::Parse(std::string_view text) {
  FieldSelector sel;
  if (text.find_first_not_of(" \t") == std::string_view::npos) return sel;
  // Split on unescaped commas, then on the first unescaped operator.
  std::vector<std::string> parts;
  std::string cur;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      cur += text[i];
      cur += text[++i];
    } else if (text[i] == ',') {
      parts.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += text[i];
    }
  }
  parts.push_back(std::move(cur));
  for (const auto& part : parts) {
    Requirement r;
    std::size_t op = std::string::npos;
    std::size_t op_len = 0;
    for (std::size_t i = 0; i < part.size(); ++i) {
      if (part[i] == '\\') {
        ++i;
        continue;
      }
      if (part.compare(i, 2, "!=") == 0) {
        op = i, op_len = 2, r.negate = true;
      } else if (part.compare(i, 2, "==") == 0) {
        op = i, op_len = 2;
      } else if (part[i] == '=') {
        op = i, op_len = 1;
      }
      if (op != std::string::npos) break;
    }
    if (op == std::string::npos) {
      return Error{
          fmt::format("invalid field selector \"{}\": \"{}\" has no =, == or != operator", text, part)};
    }
    std::string_view field(part.data(), op);
    while (!field.empty() && (field.back() == ' ')) field.remove_suffix(1);
    while (!field.empty() && (field.front() == ' ')) field.remove_prefix(1);
    if (field.empty()) return Error{fmt::format("invalid field selector \"{}\": empty field name", text)};
    r.field = std::string(field);
    for (std::size_t i = op + op_len; i < part.size(); ++i) {
      if (part[i] == '\\' && i + 1 < part.size()) ++i;
      r.value += part[i];
    }
    sel.requirements_.push_back(std::move(r));
  }
  return sel;
}

bool FieldSelector::Matches(const json::object& object) const {
  for (const auto& r : requirements_) {
    const bool equal = FieldValue(object, r.field) == r.value;
    if (equal == r.negate) return false;
  }
  return true;
}

std::string FieldValue(const json::object& object, std::string_view path) {
  const json::value* v = Lookup(object, path);
  if (!v || v->is_null()) return "";
  if (v->is_string()) return std::string(v->get_string());
  if (v->is_bool()) return v->get_bool() ? "true" : "false";
  return json::serialize(*v);  // numbers, and anything else, as JSON
}

}  // namespace hami::sim
