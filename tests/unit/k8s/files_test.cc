// k8s/files: the one reader of whole files (certificates, kubeconfigs, snapshots) and its errors.
#include "k8s/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace hami::k8s {
namespace {

namespace fs = std::filesystem;

class ReadWholeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hami-files-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(ReadWholeFileTest, ReadsEveryByte) {
  std::string big(200 * 1024, 'x');  // more than one read(2)
  big[0] = '\0';
  big[big.size() - 1] = '\n';
  const std::string path = Write("big.bin", big);
  auto text = ReadWholeFile(path);
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(*text, big);
  auto same = ReadInput(path);
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_EQ(*same, big);
  auto empty = ReadWholeFile(Write("empty", ""));
  ASSERT_TRUE(empty) << empty.error().message;
  EXPECT_EQ(*empty, "");
}

TEST_F(ReadWholeFileTest, ErrorsNameTheFileAndTheReason) {
  const std::string missing = (dir_ / "missing.pem").string();
  auto text = ReadWholeFile(missing);
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().path, missing);
  EXPECT_EQ(text.error().reason, "No such file or directory");
  EXPECT_EQ(text.error().message, "cannot read '" + missing + "': No such file or directory");
  // A directory opens but does not read: it is an error, not an empty file.
  auto dir = ReadWholeFile(dir_.string());
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().reason, "Is a directory");
  // As an Error, for callers returning Result<T>.
  const auto as_result = [&]() -> Result<int> {
    auto t = ReadInput(missing);
    if (!t) return t.error();
    return 0;
  };
  EXPECT_EQ(as_result().error().message, text.error().message);
}

// A file larger than the caller reads at most, or an endless one (/dev/zero named by mistake), is an error
// that says so: it is never read until memory runs out.
TEST_F(ReadWholeFileTest, StopsAtTheMostItReads) {
  const std::string path = Write("twenty", std::string(20, 'x'));
  auto fits = ReadWholeFile(path, 20);
  ASSERT_TRUE(fits) << fits.error().message;
  auto over = ReadWholeFile(path, 19);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message,
            "cannot read '" + path + "': larger than 19 bytes, the most read from one file");
  auto endless = ReadWholeFile("/dev/zero", 1 << 20);
  ASSERT_FALSE(endless);
  EXPECT_EQ(endless.error().reason, "larger than 1048576 bytes, the most read from one file");
}

// Standard input ("-") goes through the same bounded reader.
TEST_F(ReadWholeFileTest, StandardInputIsReadLikeAFile) {
  const std::string path = Write("stdin.txt", "from standard input\n");
  const int saved = ::dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  FILE* in = std::freopen(path.c_str(), "r", stdin);
  ASSERT_NE(in, nullptr);
  auto text = ReadInput("-");
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(*text, "from standard input\n");
}

}  // namespace
}  // namespace hami::k8s
