// RFC 6902 applied (k8s/json_patch): JSON Pointers both ways, and the operations applied atomically.
// Computing a patch is tested with the admission wire (admission_test.cc).
#include "k8s/json_patch.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hami::k8s {
namespace {

namespace json = boost::json;

json::value Parse(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  return ec ? json::value() : v;
}

TEST(JsonPointer, EscapesRoundTrip) {
  auto p = ParseJsonPointer("/metadata/annotations/hami.io~1mutex.lock/~0x");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (std::vector<std::string>{"metadata", "annotations", "hami.io/mutex.lock", "~x"}));
  EXPECT_EQ(JsonPointerToken("a/b~c"), "a~1b~0c");
  EXPECT_FALSE(ParseJsonPointer("no-slash"));
  EXPECT_FALSE(ParseJsonPointer("/bad~2"));
}

TEST(JsonPatch, AppliesRfc6902OperationsAtomically) {
  json::value doc = Parse(R"({"metadata":{"annotations":{"hami.io/lock":"x"}},"list":[1,2,3]})");
  auto ok = ApplyJsonPatch(doc, Parse(R"([
      {"op":"test","path":"/metadata/annotations/hami.io~1lock","value":"x"},
      {"op":"replace","path":"/metadata/annotations/hami.io~1lock","value":"y"},
      {"op":"add","path":"/list/1","value":9},
      {"op":"add","path":"/list/-","value":4},
      {"op":"remove","path":"/list/0"},
      {"op":"copy","from":"/list","path":"/copy"},
      {"op":"move","from":"/copy","path":"/moved"},
      {"op":"test","path":"/moved/0","value":9.0}])"));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_TRUE(JsonEqual(doc, Parse(R"({"metadata":{"annotations":{"hami.io/lock":"y"}},"list":[9,2,3,4],
                                       "moved":[9,2,3,4]})")));
  const json::value before = doc;
  auto failed = ApplyJsonPatch(doc, Parse(R"([{"op":"remove","path":"/list/0"},
                                             {"op":"test","path":"/metadata/annotations/hami.io~1lock","value":"x"}])"));
  EXPECT_FALSE(failed);
  EXPECT_TRUE(JsonEqual(doc, before)) << "a failed patch must change nothing";
  EXPECT_FALSE(ValidateJsonPatch(Parse(R"([{"op":"frobnicate","path":"/a"}])")));
  EXPECT_FALSE(ValidateJsonPatch(Parse(R"({"op":"add"})")));
  EXPECT_FALSE(ApplyJsonPatch(doc, Parse(R"([{"op":"replace","path":"/nope","value":1}])")));
}

}  // namespace
}  // namespace hami::k8s
