// The JSON of an explanation: what the metrics listener answers and `explain --server` reads back.
#include "extender/explain_wire.h"

#include <gtest/gtest.h>

namespace hami {
namespace {

TEST(ExplainWire, RoundTripsEveryField) {
  PodExplanation e;
  e.pod = "team/train";
  e.requests = {"app: 1 x NVIDIA, 6000 MiB"};
  e.hints = {"a hint"};
  NodeExplanation n;
  n.node = "gpu-1";
  n.reason = "1/1 CardInsufficientMemory";
  n.resolvable = true;
  n.closest = ClosestCard{"GPU-a", "app", Reason::kCardInsufficientMemory, 2000, 6000, 4000, 16000, 70, 100,
                          1, 10};
  e.nodes = {n, NodeExplanation{"gpu-2", true, "", false, std::nullopt}};
  auto back = extender::ParseExplanation(extender::ExplanationJson(e));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->pod, e.pod);
  EXPECT_EQ(back->requests, e.requests);
  EXPECT_EQ(back->hints, e.hints);
  ASSERT_EQ(back->nodes.size(), 2u);
  EXPECT_EQ(back->nodes[0].Summary(), n.Summary());
  EXPECT_EQ(back->nodes[0].closest->reason, Reason::kCardInsufficientMemory);
  EXPECT_TRUE(back->nodes[1].fits);
  EXPECT_FALSE(back->nodes[1].closest);
}

TEST(ExplainWire, AnythingElseIsRefusedWithTheReason) {
  EXPECT_EQ(extender::ParseExplanation("not json").error().message, "explanation: expected a JSON object");
  auto missing = extender::ParseExplanation(R"({"pod":"a/b","requests":[],"hints":[]})");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("a field is missing or of another type"), std::string::npos);
}

}  // namespace
}  // namespace hami
