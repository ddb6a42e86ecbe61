// The extender wire JSON (/filter and /bind bodies, and our answers): what ParseExtenderArgs and
// ParseBindingArgs accept re-encodes to the same arguments, and every answer ToJson/BindingResultJson
// writes is valid JSON that says what was meant, whatever the request held.
#include <boost/json.hpp>

#include "k8s/extender.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace json = boost::json;

json::value ParseAnswer(const std::string& answer) {
  boost::system::error_code ec;
  json::value v = json::parse(answer, ec);
  FUZZ_CHECK(!ec, "an answer is not valid JSON: " + answer);
  FUZZ_CHECK(v.is_object(), "an answer is not a JSON object: " + answer);
  return v;
}

void CheckFilterAnswers(const hami::k8s::ExtenderArgs& args, const json::value& pod_json) {
  // Pass-through: the candidates echoed in the form they came in.
  hami::FilterOutcome pass;
  pass.kind = hami::FilterOutcome::Kind::kPassThrough;
  const std::string echoed = hami::k8s::ToJson(hami::k8s::ToFilterResult(pass, args));
  const json::object answer = ParseAnswer(echoed).get_object();
  if (args.nodes) {
    const auto& items = answer.at("Nodes").at("items").as_array();
    FUZZ_CHECK(items.size() == args.nodes_json.size(), "Nodes echoed with another count: " + echoed);
    auto reread = hami::k8s::ParseExtenderArgs(
        json::serialize(json::object{{"Pod", pod_json}, {"Nodes", json::object{{"items", items}}}}));
    FUZZ_CHECK(reread.has_value(), "echoed Nodes do not parse back: " + echoed);
    FUZZ_CHECK(reread->nodes && reread->nodes->size() == args.nodes->size(), "echoed Nodes lost nodes");
    for (std::size_t i = 0; i < args.nodes->size(); ++i) {
      FUZZ_CHECK((*reread->nodes)[i] == (*args.nodes)[i], "an echoed node has another name");
    }
  } else {
    const auto& names = answer.at("NodeNames").as_array();
    const auto want = args.node_names.value_or(std::vector<std::string>{});
    FUZZ_CHECK(names.size() == want.size(), "NodeNames echoed with another count: " + echoed);
    for (std::size_t i = 0; i < want.size(); ++i) {
      FUZZ_CHECK(names[i].as_string() == want[i], "an echoed node name differs: " + echoed);
    }
  }
  // Every candidate rejected, with a reason that quotes it.
  hami::FilterOutcome none;
  none.kind = hami::FilterOutcome::Kind::kUnschedulable;
  std::vector<std::string> candidates = args.node_names.value_or(std::vector<std::string>{});
  if (args.nodes) {
    for (const auto& n : *args.nodes) candidates.push_back(n);
  }
  for (const auto& c : candidates) none.failed_nodes[c] = "node '" + c + "' does not fit";
  const std::string rejected = hami::k8s::ToJson(hami::k8s::ToFilterResult(none, args));
  const json::object failed = ParseAnswer(rejected).get_object();
  const json::value& failed_nodes = failed.at("FailedNodes");
  FUZZ_CHECK(failed_nodes.is_object() && failed_nodes.get_object().size() == none.failed_nodes.size(),
             "FailedNodes lost entries: " + rejected);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);

  auto args = hami::k8s::ParseExtenderArgs(text);
  if (args) {
    // Parsed, so the body is an object with a Pod (found the way ParseExtenderArgs finds it).
    const json::value root = json::parse(text);
    CheckFilterAnswers(*args, *hami::k8s::FindKey(root.get_object(), "Pod"));
  } else {
    hami::FilterOutcome error;
    error.kind = hami::FilterOutcome::Kind::kError;
    error.error = args.error().message;
    hami::k8s::ExtenderArgs empty;
    const std::string answer = hami::k8s::ToJson(hami::k8s::ToFilterResult(error, empty));
    FUZZ_CHECK(ParseAnswer(answer).at("Error").as_string() == error.error, "the error was not sent as is");
  }

  auto binding = hami::k8s::ParseBindingArgs(text);
  if (binding) {
    const std::string reencoded = json::serialize(json::object{{"PodName", binding->pod_name},
                                                               {"PodNamespace", binding->pod_namespace},
                                                               {"PodUID", binding->pod_uid},
                                                               {"Node", binding->node}});
    auto again = hami::k8s::ParseBindingArgs(reencoded);
    FUZZ_CHECK(again.has_value(), "re-encoded binding args do not parse: " + reencoded);
    FUZZ_CHECK(again->pod_name == binding->pod_name && again->pod_namespace == binding->pod_namespace &&
                   again->pod_uid == binding->pod_uid && again->node == binding->node,
               "binding args changed: " + reencoded);
  }
  const std::string message = binding ? std::string("bound to ") + binding->node : binding.error().message;
  const std::string answer = hami::k8s::BindingResultJson(message);
  FUZZ_CHECK(ParseAnswer(answer).at("Error").as_string() == message, "the bind error was not sent as is");
  return 0;
}
