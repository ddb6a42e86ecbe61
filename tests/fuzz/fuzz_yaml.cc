// The YAML reader (inspect/simulate files, the embedded API server's YAML bodies): every document it
// returns serializes to valid JSON, and that JSON, read as YAML again (JSON is YAML), is the same value.
#include <boost/json.hpp>

#include "k8s/yaml_json.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto docs = hami::k8s::YamlToJson(text, "fuzz.yaml");
  if (!docs) {
    FUZZ_CHECK(docs.error().message.find("fuzz.yaml") != std::string::npos, "the error names no file");
    return 0;
  }
  for (const auto& doc : *docs) {
    const std::string serialized = boost::json::serialize(doc);
    boost::system::error_code ec;
    const boost::json::value parsed = boost::json::parse(serialized, ec);
    FUZZ_CHECK(!ec, "a document serializes to invalid JSON: " + serialized);
    FUZZ_CHECK(parsed == doc, "a document changes through JSON: " + serialized);
    auto again = hami::k8s::YamlToJson(serialized, "again.json");
    FUZZ_CHECK(again.has_value(), "its JSON form is refused: " + serialized);
    FUZZ_CHECK(again->size() == 1 && again->front() == doc, "its JSON form reads differently: " + serialized);
  }
  return 0;
}
