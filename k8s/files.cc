#include "k8s/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

namespace hami::k8s {
namespace {

std::string DirectoryOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Result<void> Failed(std::string_view what, const std::string& path, std::string_view step, int error) {
  return Error{fmt::format("cannot write {} '{}': {}: {}", what, path, step, std::strerror(error))};
}

FileError CannotRead(const std::string& path, int error) {
  FileError e;
  e.path = path;
  e.reason = std::strerror(error);
  e.message = fmt::format("cannot read '{}': {}", path, e.reason);
  return e;
}

FileError TooLarge(const std::string& path, std::size_t max_bytes) {
  FileError e;
  e.path = path;
  e.reason = fmt::format("larger than {} bytes, the most read from one file", max_bytes);
  e.message = fmt::format("cannot read '{}': {}", path, e.reason);
  return e;
}

// Everything `fd` holds (named `path` in errors), at most `max_bytes`.
FileText ReadAll(int fd, const std::string& path, std::size_t max_bytes) {
  std::string text;
  if (struct stat st {}; ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    if (static_cast<std::uintmax_t>(st.st_size) > max_bytes) return TooLarge(path, max_bytes);
    text.reserve(static_cast<std::size_t>(st.st_size));
  }
  char chunk[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return CannotRead(path, errno);  // EISDIR for a directory
    if (n == 0) return text;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) return TooLarge(path, max_bytes);
    text.append(chunk, static_cast<std::size_t>(n));
  }
}

}  // namespace

FileText ReadWholeFile(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CannotRead(path, errno);
  FileText text = ReadAll(fd, path, max_bytes);
  ::close(fd);
  return text;
}

FileText ReadInput(const std::string& path) {
  return path == "-" ? ReadAll(STDIN_FILENO, "-", kMaxFileBytes) : ReadWholeFile(path);
}

Result<void> ReplaceFile(const std::string& path, std::string_view content, mode_t mode,
                         std::string_view what) {
  if (path.empty() || path.back() == '/')
    return Error{fmt::format("cannot write {} '{}': expected a file path", what, path)};
  const std::string dir = DirectoryOf(path);
  const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  std::random_device random;
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    temp = fmt::format("{}/.{}.{:08x}.tmp", dir, base, random());
    // O_EXCL: a name someone else planted (a file or a symlink) is never opened.
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST) return Failed(what, path, "create a temporary file", errno);
  }
  if (fd < 0) return Failed(what, path, "create a temporary file", EEXIST);
  int error = 0;
  const char* step = "";
  // The umask may have cleared bits of `mode`; a kubeconfig must not end up wider than asked either way.
  if (::fchmod(fd, mode) != 0) {
    error = errno;
    step = "set its mode";
  }
  for (std::size_t written = 0; error == 0 && written < content.size();) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : EIO;
      step = "write";
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  if (error == 0 && ::fsync(fd) != 0) {
    error = errno;
    step = "fsync";
  }
  if (::close(fd) != 0 && error == 0) {
    error = errno;
    step = "close";
  }
  // rename(2) replaces the directory entry itself: a symlink at `path` goes, its target stays untouched.
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) {
    error = errno;
    step = "rename over it";
  }
  if (error != 0) {
    ::unlink(temp.c_str());
    return Failed(what, path, step, error);
  }
  // The rename itself survives a crash once the directory is synced too (best effort: some file systems
  // refuse fsync on a directory).
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
  return {};
}

}  // namespace hami::k8s
