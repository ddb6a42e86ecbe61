#include "k8s/objects.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "k8s/files.h"
#include "k8s/yaml_json.h"

namespace hami::k8s {
namespace {

ObjectSet Collect(std::string_view text) {
  ObjectSet out;
  auto docs = ParseDocuments(text, "test").value();
  for (const auto& d : docs) CollectObjects(d, "test", out).value();
  return out;
}

TEST(Objects, NodeFromJson) {
  auto set = Collect(R"({"kind":"Node","metadata":{"name":"n1","uid":"u","resourceVersion":"7",
    "labels":{"gpu":"on"},"annotations":{"hami.io/node-handshake":"Requesting_2024-01-01 00:00:00"}},
    "status":{"capacity":{"nvidia.com/gpu":"40"},"allocatable":{"nvidia.com/gpu":"40","cpu":"63500m"}}})");
  ASSERT_EQ(set.nodes.size(), 1u);
  const NodeView& n = set.nodes[0];
  EXPECT_EQ(n.name, "n1");
  EXPECT_EQ(n.resource_version, "7");
  EXPECT_EQ(n.labels.at("gpu"), "on");
  EXPECT_EQ(n.allocatable.at("cpu"), "63500m");
  EXPECT_EQ(n.capacity.at("nvidia.com/gpu"), "40");
}

// Found by tests/fuzz/fuzz_yaml: yaml-cpp passed invalid UTF-8 through into JSON strings that no JSON
// reader accepts (the embedded API server then answered with invalid JSON).
// yaml-cpp 0.7 never returns on these (found by tests/fuzz/fuzz_yaml): refused before it sees them.
TEST(Objects, YamlThatHangsYamlCppIsRefused) {
  for (std::string_view bad :
       std::initializer_list<std::string_view>{"\"a\",", "\"a\", -{\"b", "- 1\n\"b\",", "'a' ,b", "\"a\"\n,",
                                               "--- !t &x \"a\\\"\",#", "# c\n\"a\",[]"}) {
    auto r = YamlToJson(bad, "pods.yaml");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("',' after a quoted scalar"), std::string::npos) << r.error().message;
  }
  for (std::string_view good : std::initializer_list<std::string_view>{
           "[\n\"a\",\n'b'\n]", "{\"a\": 1,\n\"b\": \"x,y\"}", "k: \"a\"\n", "- \"x\"\n- 'y'\n", "\"a\": 1\n",
           "k: |\n  echo \"a\", b\n", "\"it''s\"\n"}) {
    auto r = YamlToJson(good, "pods.yaml");
    EXPECT_TRUE(r) << good << ": " << r.error().message;
  }
}

TEST(Objects, YamlWithInvalidUtf8IsRefused) {
  // A stray byte, a cut sequence, a surrogate, an overlong '/', a value past U+10FFFF; NULs, which yaml-cpp
  // reads as UTF-32 and turns into invalid UTF-8; other control characters.
  for (std::string_view bad : std::initializer_list<std::string_view>{
           "a: \xff\n", "k\xc3: v\n", "a: \xed\xa0\x80\n", "a: \xc0\xaf\n", "a: \xf4\x90\x80\x80",
           std::string_view("-\0\0\0\x01 1\n", 9), "a: \x01\n", "a: \x7f\n"}) {
    auto r = YamlToJson(bad, "pods.yaml");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("pods.yaml"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("UTF-8"), std::string::npos) << r.error().message;
  }
  auto ok = YamlToJson("a: \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"\n", "pods.yaml");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->at(0).at("a").as_string(), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
}

TEST(Objects, PodFromYamlList) {
  auto set = Collect(R"(
apiVersion: v1
kind: PodList
items:
- metadata:
    name: p
    namespace: team
    labels: {scheduling.x-k8s.io/pod-group: g1}
    annotations: {a: "1", b: yes-string}
    deletionTimestamp: "2026-01-01T00:00:00Z"
  spec:
    nodeName: n1
    schedulerName: hami-scheduler
    runtimeClassName: nvidia
    initContainers:
    - name: init
      resources: {limits: {nvidia.com/gpu: 1}}
    containers:
    - name: main
      env: [{name: A, value: b}]
      securityContext: {privileged: true}
      resources:
        limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: "3000"}
        requests: {cpu: 500m}
  status:
    phase: Running
    initContainerStatuses:
    - name: init
      state: {terminated: {exitCode: 0}}
)");
  ASSERT_EQ(set.pods.size(), 1u);
  const PodView& p = set.pods[0];
  EXPECT_EQ(p.Key(), "team/p");
  EXPECT_EQ(p.node_name, "n1");
  EXPECT_EQ(p.phase, "Running");
  EXPECT_TRUE(p.terminating);
  EXPECT_EQ(p.pod_group, "g1");
  EXPECT_EQ(p.runtime_class_name, "nvidia");
  EXPECT_EQ(p.annotations.at("a"), "1");
  ASSERT_EQ(p.init_containers.size(), 1u);
  EXPECT_EQ(p.init_containers[0].limits.at("nvidia.com/gpu"), "1");  // YAML number kept as its text
  EXPECT_EQ(p.containers[0].limits.at("nvidia.com/gpumem"), "3000");
  EXPECT_EQ(p.containers[0].requests.at("cpu"), "500m");
  EXPECT_TRUE(p.containers[0].privileged);
  EXPECT_EQ(p.containers[0].env, (std::vector<EnvVar>{{"A", "b"}}));
  ASSERT_EQ(p.init_container_statuses.size(), 1u);
  EXPECT_TRUE(p.init_container_statuses[0].terminated);
  EXPECT_EQ(p.ContainerAt(1).name, "main");
}

TEST(Objects, MultiDocumentYamlAndMixedList) {
  auto set = Collect(R"(
kind: Pod
metadata: {name: a}
spec: {containers: [{name: c}]}
---
kind: List
items:
- {kind: Node, metadata: {name: n}}
- {kind: ResourceQuota, metadata: {name: q, namespace: t}, spec: {hard: {limits.nvidia.com/gpumem: "100"}}}
- {kind: Service, metadata: {name: s, namespace: t}}
)");
  EXPECT_EQ(set.pods.size(), 1u);
  EXPECT_EQ(set.pods[0].ns, "default");
  EXPECT_EQ(set.nodes.size(), 1u);
  ASSERT_EQ(set.quotas.size(), 1u);
  EXPECT_EQ(set.quotas[0].hard.at("limits.nvidia.com/gpumem"), "100");
  EXPECT_EQ(set.skipped, (std::vector<std::string>{"Service t/s"}));
}

TEST(Objects, ErrorsNameObjectAndField) {
  ObjectSet out;
  auto docs = ParseDocuments(R"({"kind":"Pod","metadata":{"name":"p","namespace":"ns"},
      "spec":{"containers":[{"name":"c","resources":{"limits":["x"]}}]}})",
                             "f.json")
                  .value();
  auto r = CollectObjects(docs[0], "f.json", out);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("Pod ns/p"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("spec.containers[0].resources.limits"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("f.json"), std::string::npos);

  auto no_kind = CollectObjects(ParseDocuments(R"({"metadata":{"name":"x"}})", "f").value()[0], "f", out);
  ASSERT_FALSE(no_kind);
  EXPECT_NE(no_kind.error().message.find("no \"kind\""), std::string::npos);
  auto node_name =
      CollectObjects(ParseDocuments(R"({"kind":"Node","metadata":{}})", "f").value()[0], "f", out);
  ASSERT_FALSE(node_name);
  EXPECT_NE(node_name.error().message.find("metadata.name"), std::string::npos);
}

// What kube-scheduler's queue reads of a pod: gates, priority, nomination and the PodScheduled condition;
// a value of the wrong type is an error naming the field.
TEST(Objects, PodSchedulingState) {
  const auto pod = PodFromJson(boost::json::parse(R"({"metadata":{"name":"p","namespace":"ns"},
      "spec":{"priority":1000,"preemptionPolicy":"Never","schedulingGates":[{"name":"wait"}],"containers":[]},
      "status":{"nominatedNodeName":"n2","conditions":[
        {"type":"Ready","status":"False"},
        {"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"0/3 nodes",
         "lastTransitionTime":"2026-12-05T07:00:00Z"}]}})"));
  ASSERT_TRUE(pod) << pod.error().message;
  EXPECT_EQ(pod->priority, 1000);
  EXPECT_TRUE(pod->never_preempts);
  EXPECT_TRUE(pod->scheduling_gated);
  EXPECT_EQ(pod->nominated_node_name, "n2");
  EXPECT_EQ(pod->scheduled,
            (SchedulingCondition{"False", "Unschedulable", "0/3 nodes", "2026-12-05T07:00:00Z"}));
  EXPECT_TRUE(pod->scheduled.Refused());
  const auto plain =
      PodFromJson(boost::json::parse(R"({"metadata":{"name":"p"},"spec":{"schedulingGates":[]}})"));
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->scheduling_gated);
  EXPECT_FALSE(plain->never_preempts);
  EXPECT_FALSE(plain->scheduled.Refused());
  for (const char* bad : {R"({"metadata":{"name":"p"},"spec":{"priority":"high"}})",
                          R"({"metadata":{"name":"p"},"spec":{"priority":4294967296}})",
                          R"({"metadata":{"name":"p"},"spec":{"schedulingGates":{}}})",
                          R"({"metadata":{"name":"p"},"status":{"conditions":{}}})",
                          R"({"metadata":{"name":"p"},
                                 "status":{"conditions":[{"type":"PodScheduled","status":1}]}})"}) {
    const auto r = PodFromJson(boost::json::parse(bad));
    EXPECT_FALSE(r) << bad;
  }
  EXPECT_NE(PodFromJson(boost::json::parse(R"({"metadata":{"name":"p"},"spec":{"priority":"high"}})"))
                .error()
                .message.find("spec.priority"),
            std::string::npos);
}

TEST(Objects, DisruptionBudget) {
  const auto b = DisruptionBudgetFromJson(boost::json::parse(R"({"kind":"PodDisruptionBudget",
      "metadata":{"name":"db","namespace":"team"},
      "spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"db"},
              "matchExpressions":[{"key":"tier","operator":"In","values":["gold"]}]}},
      "status":{"disruptionsAllowed":2,"disruptedPods":{"db-1":"2026-12-05T07:00:00Z","db-0":"x"}}})"));
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->ns, "team");
  EXPECT_EQ(b->name, "db");
  EXPECT_EQ(b->disruptions_allowed, 2);
  EXPECT_EQ(b->disrupted_pods, (std::vector<std::string>{"db-0", "db-1"}));
  ASSERT_TRUE(b->selector);
  EXPECT_TRUE(b->selector->Matches({{"app", "db"}, {"tier", "gold"}}));
  EXPECT_FALSE(b->selector->Matches({{"app", "db"}}));
  const auto none = DisruptionBudgetFromJson(boost::json::parse(R"({"metadata":{"name":"x"}})"));
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->selector);
  const auto bad = DisruptionBudgetFromJson(boost::json::parse(
      R"({"metadata":{"name":"x"},"spec":{"selector":{"matchExpressions":[{"key":"a","operator":"Near"}]}}})"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "PodDisruptionBudget default/x: spec.selector.matchExpressions[].operator: expected In, NotIn, Exists "
            "or DoesNotExist, got \"Near\"");
  ObjectSet set;
  ASSERT_TRUE(CollectObjects(boost::json::parse(R"({"kind":"PodDisruptionBudgetList","items":[
      {"metadata":{"name":"a","namespace":"n"},"status":{"disruptionsAllowed":0}}]})"),
                             "f", set));
  ASSERT_EQ(set.budgets.size(), 1u);
  EXPECT_EQ(set.budgets[0].name, "a");
}

TEST(Objects, BadDocuments) {
  auto truncated = ParseDocuments(R"({"kind":"Node","metadata":{"name":)", "t.json");
  ASSERT_FALSE(truncated);
  EXPECT_NE(truncated.error().message.find("t.json"), std::string::npos);
  auto bad_yaml = ParseDocuments("a: [1, 2\nb: c", "t.yaml");
  ASSERT_FALSE(bad_yaml);
  EXPECT_NE(bad_yaml.error().message.find("t.yaml:"), std::string::npos) << bad_yaml.error().message;
  EXPECT_FALSE(ReadInput("/nonexistent/file.json"));
}

TEST(Objects, ConcatenatedJsonObjects) {
  auto docs = ParseDocuments(
                  R"({"kind":"Node","metadata":{"name":"a"}} {"kind":"Node","metadata":{"name":"b"}})", "s")
                  .value();
  EXPECT_EQ(docs.size(), 2u);
}

// Aliases: a legitimate one is expanded; one that contains itself, and an alias bomb, are errors that name
// the limit (they overflowed the stack and grew without bound).
TEST(YamlToJson, ExpandsAliasesWithinBounds) {
  auto shared = YamlToJson("base: &labels {app: gpu, tier: a}\nnode: {labels: *labels}\n", "t.yaml");
  ASSERT_TRUE(shared) << shared.error().message;
  EXPECT_EQ(boost::json::serialize(shared->at(0)),
            R"({"base":{"app":"gpu","tier":"a"},"node":{"labels":{"app":"gpu","tier":"a"}}})");

  for (const char* endless : {"&a [*a]", "a: &a {b: *a}", "- &x [1, [2, *x]]"}) {
    auto r = YamlToJson(endless, "self.yaml");
    ASSERT_FALSE(r) << endless;
    EXPECT_EQ(r.error().message.find("self.yaml:1: YAML nested deeper than 128 levels"), 0u)
        << r.error().message;
  }

  std::string bomb = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += fmt::format("a{}: &a{} [", i, i);
    for (int j = 0; j < 10; ++j) bomb += fmt::format("{}*a{}", j ? ", " : "", i - 1);
    bomb += "]\n";
  }
  auto laughs = YamlToJson(bomb, "bomb.yaml");
  ASSERT_FALSE(laughs);
  EXPECT_NE(laughs.error().message.find("YAML expands to more than"), std::string::npos)
      << laughs.error().message;
  EXPECT_NE(laughs.error().message.find("4 times the text plus 1 MiB"), std::string::npos)
      << laughs.error().message;

  std::string deep;  // nesting without aliases is bounded the same way
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  auto nested = YamlToJson(deep, "deep.yaml");
  ASSERT_FALSE(nested);
  EXPECT_NE(nested.error().message.find("nested deeper than"), std::string::npos) << nested.error().message;
  std::string fine;
  for (int i = 0; i < 100; ++i) fine += "[";
  for (int i = 0; i < 100; ++i) fine += "]";
  EXPECT_TRUE(YamlToJson(fine, "fine.yaml"));
}

}  // namespace
}  // namespace hami::k8s
