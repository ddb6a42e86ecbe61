// Issue 8 §5: log records stay one line whatever names they carry.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <sstream>

#include "cmd/app.h"
#include "k8s/logging.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The default logger swapped for one writing into a string, for the test's duration.
class CapturedLog {
 public:
  CapturedLog()
      : previous_(spdlog::default_logger()),
        logger_(std::make_shared<spdlog::logger>("captured",
                                                 std::make_shared<spdlog::sinks::ostream_sink_mt>(text_))) {
    spdlog::set_default_logger(logger_);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_, logger_;
};

TEST(LogEscaping, EveryRecordOfTheBinaryIsOneLine) {
  CapturedLog log;
  // The logger exists before the binary configures logging, as spdlog's default one does.
  std::ostringstream out, err;
  ASSERT_EQ(cmd::Run({"version"}, out, err), cmd::kExitOk);
  spdlog::warn("pod {}: refused", "default/p\r\n[2026-01-01 00:00:00.000] [error] forged");
  const std::string text = log.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_THAT(text,
              HasSubstr("[warning] pod default/p\\r\\n[2026-01-01 00:00:00.000] [error] forged: refused"));
  EXPECT_THAT(text, Not(HasSubstr("\r")));
}

TEST(LogEscaping, LoggersCreatedLaterAreCoveredToo) {
  std::ostringstream out, err;
  ASSERT_EQ(cmd::Run({"version"}, out, err), cmd::kExitOk);
  std::ostringstream text;
  auto later = spdlog::create<spdlog::sinks::ostream_sink_mt>("later", std::ref(text));
  later->error("node {}", std::string("a\nb\0c", 5));
  spdlog::drop("later");
  EXPECT_THAT(text.str(), HasSubstr("node a\\nb\\x00c\n"));
}

TEST(LogEscaping, EscapesControlsAndUnicodeLineBreaksOnly) {
  EXPECT_EQ(k8s::EscapeControlChars("plain name-1.x"), "plain name-1.x");
  EXPECT_EQ(k8s::EscapeControlChars("a\r\nb\tc\x1b[31m\x7f"), "a\\r\\nb\\tc\\x1b[31m\\x7f");
  EXPECT_EQ(k8s::EscapeControlChars("x\xc2\x85y\xe2\x80\xa8z\xe2\x80\xa9"), "x\\u0085y\\u2028z\\u2029");
  // Other UTF-8 (and a backslash) stays as it is.
  EXPECT_EQ(k8s::EscapeControlChars("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \\n"),
            "gr\xc3\xbc\xc3\x9f \xe2\x82\xac \\n");
}

}  // namespace
}  // namespace hami
