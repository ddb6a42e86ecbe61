// /filter over Cluster Autoscaler's template nodes: a body whose Nodes include nodes the registry lacks is
// answered from those objects, with every fitting node, and nothing is reserved, recorded or written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "core/codec/node_devices.h"
#include "tests/unit/extender/services_fixture.h"

namespace hami::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A Node object as the autoscaler posts it: its NVIDIA registration of one card of `mem` MiB.
boost::json::object NodeObject(const std::string& name, std::int64_t mem) {
  return boost::json::object{
      {"metadata",
       {{"name", name},
        {"annotations",
         {{"hami.io/node-nvidia-register", codec::EncodeDeviceManifest({Gpu(name + "-gpu0", 0, mem)})}}}}},
      {"status", {{"allocatable", {{"nvidia.com/gpu", "10"}}}}}};
}

// ExtenderArgs with the pod and the Nodes posted whole (nodeCacheCapable: false).
std::string Body(const std::string& pod_mem, const std::vector<boost::json::object>& nodes) {
  boost::json::array items;
  for (const auto& n : nodes) items.push_back(n);
  boost::json::object limits{{"cpu", "1"}};
  if (!pod_mem.empty()) {
    limits["nvidia.com/gpu"] = "1";
    limits["nvidia.com/gpumem"] = pod_mem;
  }
  const boost::json::object meta{
      {"namespace", "default"}, {"name", "wants"}, {"uid", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}};
  const boost::json::array containers{{{"name", "main"}, {"resources", {{"limits", limits}}}}};
  const boost::json::object pod{{"metadata", meta}, {"spec", {{"containers", containers}}}};
  return boost::json::serialize(boost::json::object{{"Pod", pod}, {"Nodes", {{"items", items}}}});
}

class TemplateFilterTest : public ServicesTest {
 protected:
  // What /filter answers for `body`, as the HTTP adapter routes it.
  boost::json::object Post(const std::string& body) {
    auto args = k8s::ParseExtenderArgs(body);
    EXPECT_TRUE(args) << args.error().message;
    auto templates =
        k8s::UnregisteredNodes(*args, [this](std::string_view n) { return filter_.Registered(n); });
    EXPECT_TRUE(templates) << templates.error().message;
    FilterOutcome out;
    RunCoro(ioc_, [&]() -> boost::asio::awaitable<void> {
      out = co_await filter_.FilterOnTemplates(args->pod, k8s::CandidatesOf(*args), *templates);
    }());
    return boost::json::parse(k8s::ToJson(k8s::ToFilterResult(out, *args))).as_object();
  }
  static std::vector<std::string> Names(const boost::json::value& nodes) {
    std::vector<std::string> out;
    for (const auto& item : nodes.at("items").as_array())
      out.emplace_back(item.at("metadata").at("name").as_string());
    return out;
  }
};

TEST_F(TemplateFilterTest, EveryFittingNodeComesBackWholeAndNothingIsRecorded) {
  AddNode("real-1");  // one 16000 MiB card, in the registry
  const std::string body =
      Body("8000", {NodeObject("real-1", 16000), NodeObject("template-big", 24000),
                    NodeObject("template-small", 4000)});
  const boost::json::object answer = Post(body);
  EXPECT_EQ(answer.at("Error"), "");
  EXPECT_THAT(Names(answer.at("Nodes")), ElementsAre("real-1", "template-big"));
  // The template comes back as it was posted, annotations and all.
  EXPECT_EQ(answer.at("Nodes").at("items").at(1), NodeObject("template-big", 24000));
  // Too small a card: no pod leaving makes room there.
  EXPECT_THAT(std::string(answer.at("FailedAndUnresolvableNodes").at("template-small").as_string()),
              HasSubstr("CardInsufficientMemory"));
  // A question, not a decision: no reservation, no event, no annotation, no refused pod to nudge, no node
  // added to the registry.
  EXPECT_TRUE(writer_.calls.empty());
  EXPECT_EQ(feed_.state().PodCount(), 0u);
  EXPECT_EQ(requeue_.candidates(), 0u);
  EXPECT_FALSE(filter_.Registered("template-big"));
}

TEST_F(TemplateFilterTest, NoNodeFitsIsAnAnswerWithEachReasonAndNoEvent) {
  const boost::json::object answer = Post(Body("30000", {NodeObject("template-a", 24000)}));
  EXPECT_EQ(answer.at("Error"), "");
  EXPECT_TRUE(answer.at("Nodes").at("items").as_array().empty());
  EXPECT_THAT(std::string(answer.at("FailedAndUnresolvableNodes").at("template-a").as_string()),
              HasSubstr("CardInsufficientMemory"));
  EXPECT_TRUE(writer_.calls.empty());
  EXPECT_EQ(requeue_.candidates(), 0u);
}

TEST_F(TemplateFilterTest, APodWithoutDevicesGetsTheNodesBackAsPosted) {
  const std::vector<boost::json::object> nodes{NodeObject("template-a", 24000),
                                               NodeObject("template-b", 8000)};
  const boost::json::object answer = Post(Body("", nodes));
  EXPECT_EQ(answer.at("Error"), "");
  EXPECT_THAT(Names(answer.at("Nodes")), ElementsAre("template-a", "template-b"));
  EXPECT_TRUE(answer.at("NodeNames").is_null());
}

TEST_F(TemplateFilterTest, AnUnreadableTemplateIsNamedAndOnlyUnknownNodesAreRead) {
  AddNode("real-1");
  boost::json::object broken = NodeObject("template-a", 24000);
  broken["metadata"].as_object()["annotations"] = "not a map";
  auto args = k8s::ParseExtenderArgs(Body("1000", {NodeObject("real-1", 16000), broken}));
  ASSERT_TRUE(args);
  const auto registered = [this](std::string_view n) { return filter_.Registered(n); };
  auto templates = k8s::UnregisteredNodes(*args, registered);
  ASSERT_FALSE(templates);
  EXPECT_THAT(templates.error().message, HasSubstr("ExtenderArgs.Nodes.items[1]: "));
  EXPECT_THAT(templates.error().message, HasSubstr("metadata.annotations"));
  // The registry's node is never read from the body: a broken copy of it costs nothing.
  boost::json::object broken_real = NodeObject("real-1", 16000);
  broken_real["metadata"].as_object()["annotations"] = "not a map";
  auto known = k8s::ParseExtenderArgs(Body("1000", {broken_real}));
  ASSERT_TRUE(known);
  auto none = k8s::UnregisteredNodes(*known, registered);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace hami::testing
