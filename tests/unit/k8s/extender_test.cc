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
  EXPECT_EQ(a.nodes->at(0).name, "t1");
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

}  // namespace
}  // namespace hami::k8s
