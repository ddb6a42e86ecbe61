// Log records stay one line whatever names they carry, and files named on the command line are
// replaced, never written through a symlink.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "cmd/app.h"
#include "k8s/files.h"
#include "k8s/logging.h"
#include "sim/apiserver/api_server.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

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

class ReplaceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("replace_file_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    victim_ = dir_ / "victim";
    std::ofstream(victim_) << "precious";
    ::chmod(victim_.c_str(), 0644);
    target_ = dir_ / "kubeconfig";
    fs::create_symlink(victim_, target_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void ExpectReplacedAndVictimUntouched(std::string_view content) {
    EXPECT_EQ(Read(victim_), "precious");
    struct stat vs{};
    ASSERT_EQ(::stat(victim_.c_str(), &vs), 0);
    EXPECT_EQ(vs.st_mode & 0777, 0644u);
    struct stat ts{};
    ASSERT_EQ(::lstat(target_.c_str(), &ts), 0);
    EXPECT_TRUE(S_ISREG(ts.st_mode));
    EXPECT_EQ(ts.st_mode & 0777, 0600u);
    EXPECT_EQ(Read(target_), content);
    // No temporary file is left behind.
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2);
  }
  fs::path dir_, victim_, target_;
};

TEST_F(ReplaceFileTest, ASymlinkAtTheTargetIsReplacedNotFollowed) {
  ASSERT_TRUE(k8s::ReplaceFile(target_.string(), "secret: 1\n", 0600, "kubeconfig"));
  ExpectReplacedAndVictimUntouched("secret: 1\n");
  // An existing regular file is replaced the same way.
  ASSERT_TRUE(k8s::ReplaceFile(target_.string(), "secret: 2\n", 0600, "kubeconfig"));
  ExpectReplacedAndVictimUntouched("secret: 2\n");
}

TEST_F(ReplaceFileTest, TheEmbeddedApiServersKubeconfigIsWrittenTheSameWay) {
  // sim-apiserver --kubeconfig-out and demo --kubeconfig-out write through this.
  boost::asio::io_context ioc;
  sim::ApiServer server(ioc);
  ASSERT_TRUE(server.WriteKubeconfig(target_.string()));
  ExpectReplacedAndVictimUntouched(server.Kubeconfig());
}

TEST_F(ReplaceFileTest, ErrorsNameTheFileAndTheStep) {
  auto missing = k8s::ReplaceFile((dir_ / "no-such-dir" / "kubeconfig").string(), "x", 0600, "kubeconfig");
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("cannot write kubeconfig '" + dir_.string()));
  EXPECT_THAT(missing.error().message, HasSubstr("create a temporary file"));
  auto directory = k8s::ReplaceFile(dir_.string() + "/", "x", 0600, "kubeconfig");
  ASSERT_FALSE(directory);
  EXPECT_THAT(directory.error().message, HasSubstr("expected a file path"));
  fs::create_directory(dir_ / "sub");
  auto onto_dir = k8s::ReplaceFile((dir_ / "sub").string(), "x", 0600, "kubeconfig");
  ASSERT_FALSE(onto_dir);
  EXPECT_THAT(onto_dir.error().message, HasSubstr("rename over it"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3);  // victim, link, sub
}

}  // namespace
}  // namespace hami
