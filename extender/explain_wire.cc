#include "extender/explain_wire.h"

#include <fmt/format.h>

#include <boost/json.hpp>

namespace hami::extender {
namespace json = boost::json;

namespace {

json::array Strings(const std::vector<std::string>& v) { return json::array(v.begin(), v.end()); }

Reason ReasonNamed(std::string_view name) {
  for (int r = 0; r < static_cast<int>(Reason::kCount); ++r) {
    if (ReasonName(static_cast<Reason>(r)) == name) return static_cast<Reason>(r);
  }
  return Reason::kCount;
}

}  // namespace

std::string ExplanationJson(const PodExplanation& e) {
  json::array nodes;
  for (const NodeExplanation& n : e.nodes) {
    json::object o{{"node", n.node}, {"fits", n.fits}, {"reason", n.reason}, {"resolvable", n.resolvable},
                   {"summary", n.Summary()}};
    if (n.closest) {
      const ClosestCard& c = *n.closest;
      o["closest"] = json::object{{"device", c.device},         {"container", c.container},
                                  {"reason", ReasonName(c.reason)}, {"shortBy", c.short_by},
                                  {"wanted", c.wanted},         {"memFree", c.mem_free},
                                  {"memTotal", c.mem_total},    {"coresUsed", c.cores_used},
                                  {"coresTotal", c.cores_total}, {"tasks", c.tasks},
                                  {"taskLimit", c.task_limit}};
    }
    nodes.push_back(std::move(o));
  }
  json::object doc{{"pod", e.pod}, {"requests", Strings(e.requests)}, {"nodes", std::move(nodes)},
                   {"hints", Strings(e.hints)}};
  if (!e.error.empty()) doc["error"] = e.error;
  return json::serialize(doc);
}

Result<PodExplanation> ParseExplanation(std::string_view body) {
  json::error_code ec;
  const json::value root = json::parse(body, ec);
  if (ec || !root.is_object()) return Error{"explanation: expected a JSON object"};
  try {
    const json::object& o = root.as_object();
    PodExplanation e;
    e.pod = std::string(o.at("pod").as_string());
    if (const auto* err = o.if_contains("error")) e.error = std::string(err->as_string());
    for (const auto& r : o.at("requests").as_array()) e.requests.emplace_back(r.as_string());
    for (const auto& h : o.at("hints").as_array()) e.hints.emplace_back(h.as_string());
    for (const auto& v : o.at("nodes").as_array()) {
      const json::object& n = v.as_object();
      NodeExplanation out;
      out.node = std::string(n.at("node").as_string());
      out.fits = n.at("fits").as_bool();
      out.reason = std::string(n.at("reason").as_string());
      out.resolvable = n.at("resolvable").as_bool();
      if (const auto* c = n.if_contains("closest")) {
        const json::object& co = c->as_object();
        ClosestCard card;
        card.device = std::string(co.at("device").as_string());
        card.container = std::string(co.at("container").as_string());
        card.reason = ReasonNamed(co.at("reason").as_string());
        card.short_by = co.at("shortBy").to_number<std::int64_t>();
        card.wanted = co.at("wanted").to_number<std::int64_t>();
        card.mem_free = co.at("memFree").to_number<std::int64_t>();
        card.mem_total = co.at("memTotal").to_number<std::int64_t>();
        card.cores_used = co.at("coresUsed").to_number<std::int64_t>();
        card.cores_total = co.at("coresTotal").to_number<std::int64_t>();
        card.tasks = co.at("tasks").to_number<std::int64_t>();
        card.task_limit = co.at("taskLimit").to_number<std::int64_t>();
        out.closest = card;
      }
      e.nodes.push_back(std::move(out));
    }
    return e;
  } catch (const std::exception& ex) {
    return Error{fmt::format("explanation: a field is missing or of another type ({})", ex.what())};
  }
}

}  // namespace hami::extender
