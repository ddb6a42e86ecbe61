#include "k8s/extender.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace hami::k8s {
namespace {
namespace json = boost::json;

constexpr const char* kPod =
    R"({"metadata":{"name":"p","namespace":"ns","uid":"u1"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})";

TEST(ExtenderArgs, PascalCaseAndLowerCaseBothDecode) {
  auto a = ParseExtenderArgs(std::string(R"({"Pod":)") + kPod + R"(,"Nodes":null,"NodeNames":["n1","n2"]})")
               .value();
  EXPECT_EQ(a.pod.Key(), "ns/p");
  ASSERT_TRUE(a.node_names);
  EXPECT_EQ(*a.node_names, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_FALSE(a.nodes);
  auto lower = ParseExtenderArgs(std::string(R"({"pod":)") + kPod + R"(,"nodenames":["n3"]})").value();
  EXPECT_EQ(lower.node_names->front(), "n3");
}

TEST(ExtenderArgs, NodesForm) {
  auto a = ParseExtenderArgs(std::string(R"({"Pod":)") + kPod +
                             R"(,"Nodes":{"metadata":{},"items":[{"metadata":{"name":"t1"}}]}})")
               .value();
  ASSERT_TRUE(a.nodes);
  EXPECT_EQ(a.nodes->at(0), "t1");
  EXPECT_FALSE(a.node_names);
}

TEST(ExtenderArgs, Errors) {
  EXPECT_EQ(ParseExtenderArgs(R"({"NodeNames":["n1"]})").error().message, "extender args missing pod");
  EXPECT_EQ(ParseExtenderArgs(R"({"Pod":null})").error().message, "extender args missing pod");
  EXPECT_NE(ParseExtenderArgs("").error().message.find("EOF"), std::string::npos);
  EXPECT_NE(ParseExtenderArgs("{\"Pod\":").error().message.find("invalid JSON"), std::string::npos);
  EXPECT_NE(ParseExtenderArgs(std::string(R"({"Pod":)") + kPod + R"(,"NodeNames":"n1"})")
                .error()
                .message.find("NodeNames"),
            std::string::npos);
}

TEST(ExtenderPreemptionArgs, MetaVictimsAndFullVictimsGiveUids) {
  auto meta = ParsePreemptionArgs(std::string(R"({"Pod":)") + kPod +
                                  R"(,"NodeNameToVictims":null,"NodeNameToMetaVictims":{)"
                                  R"("n1":{"Pods":[{"UID":"a"},{"UID":"b"}],"NumPDBViolations":1},)"
                                  R"("n2":{"Pods":[],"NumPDBViolations":0},"n3":null}})")
                  .value();
  EXPECT_EQ(meta.pod.Key(), "ns/p");
  EXPECT_EQ(meta.victims.at("n1"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(meta.pdb_violations.at("n1"), 1);
  EXPECT_TRUE(meta.victims.at("n2").empty());
  EXPECT_TRUE(meta.victims.at("n3").empty());
  auto full = ParsePreemptionArgs(std::string(R"({"pod":)") + kPod +
                                  R"(,"nodeNameToVictims":{"n1":{"pods":[{"metadata":{"name":"v","uid":"c"}}]}}})")
                  .value();
  EXPECT_EQ(full.victims.at("n1"), std::vector<std::string>{"c"});
}

TEST(ExtenderPreemptionArgs, Errors) {
  const auto error = [](const std::string& rest) {
    auto r = ParsePreemptionArgs(std::string(R"({"Pod":)") + kPod + rest);
    return r ? std::string("<parsed>") : r.error().message;
  };
  EXPECT_NE(error(R"(,"NodeNameToMetaVictims":{"bad node":{}}})").find("bad node"), std::string::npos);
  EXPECT_NE(error(R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"a/b"}]}}})").find("is not a UID"),
            std::string::npos);
  EXPECT_NE(error(R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[{}]}}})").find("Pods[0].UID: expected a string"),
            std::string::npos);
  EXPECT_NE(error(R"(,"NodeNameToMetaVictims":{"n1":{"Pods":{}}}})").find("expected a list"),
            std::string::npos);
  EXPECT_NE(error(R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[],"NumPDBViolations":-1}}})")
                .find("NumPDBViolations"),
            std::string::npos);
  const std::string both = R"(,"NodeNameToMetaVictims":{"n1":{}},"NodeNameToVictims":{"n1":{}}})";
  EXPECT_NE(error(both).find("listed twice"), std::string::npos);
  EXPECT_EQ(ParsePreemptionArgs(R"({"NodeNameToMetaVictims":{}})").error().message,
            "ExtenderPreemptionArgs: missing Pod");
}

TEST(ExtenderPreemptionResult, GoFieldNames) {
  std::map<std::string, MetaVictims> result;
  result["n1"] = MetaVictims{{"b", "a"}, 2};
  EXPECT_EQ(json::parse(ToJson(result)),
            json::parse(R"({"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"b"},{"UID":"a"}],"NumPDBViolations":2}}})"));
  EXPECT_EQ(json::parse(ToJson(std::map<std::string, MetaVictims>{})),
            json::parse(R"({"NodeNameToMetaVictims":{}})"));
}

TEST(ExtenderFilterResult, GoFieldNamesAndNulls) {
  ExtenderFilterResult r;
  r.node_names = std::vector<std::string>{"node1"};
  r.failed_nodes = {{"foo", "bar"}};
  r.failed_and_unresolvable = {{"baz", "qux"}};
  r.error = "myerror";
  EXPECT_EQ(
      ToJson(r),
      R"({"Nodes":null,"NodeNames":["node1"],"FailedNodes":{"foo":"bar"},"FailedAndUnresolvableNodes":{"baz":"qux"},"Error":"myerror"})");
}

TEST(ExtenderFilterResult, FromOutcomes) {
  auto args = ParseExtenderArgs(std::string(R"({"Pod":)") + kPod + R"(,"NodeNames":["a","b","c"]})").value();
  FilterOutcome scheduled;
  scheduled.kind = FilterOutcome::Kind::kScheduled;
  scheduled.node = "b";
  scheduled.failed_nodes = {{"c", "1/1 CardInsufficientMemory"}};
  auto r = ToFilterResult(scheduled, args);
  EXPECT_EQ(*r.node_names, (std::vector<std::string>{"b"}));
  EXPECT_TRUE(r.failed_nodes.empty());  // kube-scheduler keeps the one node and reads no reasons

  FilterOutcome none;
  none.kind = FilterOutcome::Kind::kUnschedulable;
  none.failed_nodes = {{"a", "x"}, {"b", "y"}, {"c", "z"}};
  auto n = ToFilterResult(none, args);
  ASSERT_TRUE(n.node_names);  // [] rather than null
  EXPECT_TRUE(n.node_names->empty());
  EXPECT_NE(ToJson(n).find(R"("NodeNames":[])"), std::string::npos);

  FilterOutcome pass;
  pass.kind = FilterOutcome::Kind::kPassThrough;
  EXPECT_EQ(*ToFilterResult(pass, args).node_names, (std::vector<std::string>{"a", "b", "c"}));

  FilterOutcome bad;
  bad.kind = FilterOutcome::Kind::kError;
  bad.error = "pod ns/p: container \"c\": nvidia.com/gpumem: ...";
  EXPECT_EQ(ToFilterResult(bad, args).error, bad.error);

  // The Nodes form answers with Nodes (the chosen node's object), and passes everything through for
  // device-less pods (upstream echoes only NodeNames and loses them).
  auto by_nodes =
      ParseExtenderArgs(std::string(R"({"Pod":)") + kPod +
                        R"(,"Nodes":{"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}})")
          .value();
  auto rn = ToFilterResult(scheduled, by_nodes);
  ASSERT_TRUE(rn.nodes);
  ASSERT_EQ(rn.nodes->size(), 1u);
  EXPECT_EQ(rn.nodes->at(0).at("metadata").at("name").as_string(), "b");
  EXPECT_FALSE(rn.node_names);
  EXPECT_EQ(ToFilterResult(pass, by_nodes).nodes->size(), 2u);
}

TEST(ExtenderFilterResult, AllFittingAnswersEveryFittingNodeWithTheOthersReasons) {
  auto args =
      ParseExtenderArgs(std::string(R"({"Pod":)") + kPod + R"(,"NodeNames":["a","b","c","d"]})").value();
  FilterOutcome fitting;
  fitting.kind = FilterOutcome::Kind::kFitting;
  fitting.node = "c";
  fitting.fitting = {"a", "c"};
  fitting.failed_nodes = {{"b", "1/1 CardInsufficientMemory"}, {"d", "node unregistered"}};
  fitting.unresolvable = {"d"};
  auto r = ToFilterResult(fitting, args);
  EXPECT_EQ(*r.node_names, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(r.failed_nodes, (std::map<std::string, std::string>{{"b", "1/1 CardInsufficientMemory"}}));
  EXPECT_EQ(r.failed_and_unresolvable, (std::map<std::string, std::string>{{"d", "node unregistered"}}));
  // The Nodes form: the fitting nodes' objects, in the request's order.
  auto by_nodes = ParseExtenderArgs(std::string(R"({"Pod":)") + kPod +
                                    R"(,"Nodes":{"items":[{"metadata":{"name":"c"}},)"
                                    R"({"metadata":{"name":"b"}},{"metadata":{"name":"a"}}]}})")
                      .value();
  auto rn = ToFilterResult(fitting, by_nodes);
  ASSERT_TRUE(rn.nodes);
  ASSERT_EQ(rn.nodes->size(), 2u);
  EXPECT_EQ(rn.nodes->at(0).at("metadata").at("name").as_string(), "c");
  EXPECT_EQ(rn.nodes->at(1).at("metadata").at("name").as_string(), "a");
}

TEST(HostPriorityList, AsKubeSchedulerReadsIt) {
  EXPECT_EQ(HostPriorityListJson({{"a", 10}, {"b", 0}}),
            R"([{"Host":"a","Score":10},{"Host":"b","Score":0}])");
  EXPECT_EQ(HostPriorityListJson({}), "[]");
}

TEST(ExtenderBinding, ParseAndAnswer) {
  auto b = ParseBindingArgs(R"({"PodName":"p","PodNamespace":"ns","PodUID":"uid","Node":"node-b"})").value();
  EXPECT_EQ(b.pod_name, "p");
  EXPECT_EQ(b.pod_namespace, "ns");
  EXPECT_EQ(b.pod_uid, "uid");
  EXPECT_EQ(b.node, "node-b");
  EXPECT_EQ(ParseBindingArgs(R"({"podname":"p","node":"n"})").value().pod_namespace, "default");
  EXPECT_FALSE(ParseBindingArgs(R"({"PodName":"p"})"));
  EXPECT_FALSE(ParseBindingArgs(R"({"PodName":5,"Node":"n"})"));
  EXPECT_EQ(BindingResultJson(""), R"({"Error":""})");
  EXPECT_EQ(BindingResultJson("node n1 is locked"), R"({"Error":"node n1 is locked"})");
}

// Names from the request reach API paths, annotations and logs: only valid Kubernetes names pass,
// and the error names the field and the rule.
TEST(ExtenderArgs, HostileNamesAreRefusedAtTheEdge) {
  const auto filter_error = [](std::string pod_name, std::string ns, std::string node) {
    json::object pod = json::parse(kPod).as_object();
    pod["metadata"].as_object()["name"] = pod_name;
    pod["metadata"].as_object()["namespace"] = ns;
    json::object args{{"Pod", pod}, {"NodeNames", json::array{"n1", json::value(node)}}};
    auto r = ParseExtenderArgs(json::serialize(args));
    return r ? std::string() : r.error().message;
  };
  EXPECT_EQ(filter_error("p", "ns", "n2"), "");
  EXPECT_NE(filter_error("../../nodes/n2", "ns", "n2").find("ExtenderArgs.Pod.metadata.name"),
            std::string::npos);
  EXPECT_NE(filter_error("p?dryRun=All", "ns", "n2"), "");
  EXPECT_NE(filter_error("p", "ns/../..", "n2").find("ExtenderArgs.Pod.metadata.namespace"),
            std::string::npos);
  EXPECT_NE(filter_error("p", "a.b", "n2"), "");  // a namespace is a label: no dots
  const std::string split = filter_error("p", "ns", "n2 HTTP/1.1\r\nHost: x\r\n\r\nDELETE /api/v1/nodes/n3");
  EXPECT_NE(split.find("ExtenderArgs.NodeNames[1]"), std::string::npos) << split;
  EXPECT_NE(split.find("\\r\\n"), std::string::npos) << "the value is shown escaped: " << split;
  EXPECT_EQ(split.find('\r'), std::string::npos);
  EXPECT_NE(filter_error("p", "ns", std::string(254, 'n')), "");
  EXPECT_NE(filter_error("P", "ns", "n2"), "");

  auto nodes = ParseExtenderArgs(std::string(R"({"Pod":)") + kPod +
                                 R"(,"Nodes":{"items":[{"metadata":{"name":"../x"}}]}})");
  ASSERT_FALSE(nodes);
  EXPECT_NE(nodes.error().message.find("Nodes.items[0].metadata.name"), std::string::npos);
}

// The pod's uid keys the pod ledger and is echoed in errors and logs: a line break in it is refused, shown
// escaped.
TEST(ExtenderArgs, AUidThatIsNoUidIsRefused) {
  json::object pod = json::parse(kPod).as_object();
  pod["metadata"].as_object()["uid"] = "u1\nforged log line";
  auto r = ParseExtenderArgs(json::serialize(json::object{{"Pod", pod}, {"NodeNames", json::array{"n1"}}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, R"(ExtenderArgs.Pod.metadata.uid: "u1\nforged log line" is not a UID)");
}

TEST(ExtenderBinding, HostileNamesAreRefusedAtTheEdge) {
  const auto error = [](std::string_view body) {
    auto r = ParseBindingArgs(body);
    return r ? std::string() : r.error().message;
  };
  EXPECT_EQ(error(R"({"PodName":"p","PodNamespace":"ns","PodUID":"0b1f-22","Node":"n1.example.com"})"), "");
  EXPECT_NE(error(R"({"PodName":"../../../nodes/n2","Node":"n1"})").find("ExtenderBindingArgs.PodName"),
            std::string::npos);
  EXPECT_NE(error(R"({"PodName":"p","PodNamespace":"..","Node":"n1"})").find("PodNamespace"),
            std::string::npos);
  EXPECT_NE(error(R"({"PodName":"p","Node":"n1?dryRun=All"})").find("ExtenderBindingArgs.Node"),
            std::string::npos);
  EXPECT_NE(error(R"({"PodName":"p","Node":"n1\r\nX: y"})"), "");
  EXPECT_NE(error(R"({"PodName":"p","Node":"n1","PodUID":"u\r\n"})").find("PodUID"), std::string::npos);
}

// A number too large for a double would be echoed as the bare word Infinity, which is not JSON.
TEST(ExtenderArgs, NumbersOutOfRangeAreRefused) {
  auto r = ParseExtenderArgs(std::string(R"({"Pod":)") + kPod +
                             R"(,"Nodes":{"items":[{"metadata":{"name":"t1"},"status":{"x":1e400}}]}})");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("out of range"), std::string::npos);
  EXPECT_FALSE(ParseBindingArgs(R"({"PodName":"p","Node":"n","x":-1e999})"));
  EXPECT_TRUE(ParseBindingArgs(R"({"PodName":"p","Node":"n","x":1e300})"));
}

}  // namespace
}  // namespace hami::k8s
