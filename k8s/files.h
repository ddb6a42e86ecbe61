#pragma once
// The files the user names on the command line and in kubeconfigs: read whole (certificates, keys,
// kubeconfigs, tokens, cluster snapshots), written whole (kubeconfigs, which hold credentials).
#include <sys/types.h>

#include <boost/system/result.hpp>
#include <cstddef>
#include <string>
#include <string_view>

#include "core/result.h"

namespace hami::k8s {

// Why a file could not be read: `message` is "cannot read '<path>': <reason>"; `path` and `reason` (the
// system's words: "No such file or directory", "Is a directory", "Permission denied") are there for callers
// that phrase it their own way. Converts to Error by slicing (`return text.error();`).
struct FileError : Error {
  std::string path;
  std::string reason;
};
using FileText = boost::system::result<std::string, FileError>;

// Larger inputs are refused rather than read until memory runs out (/dev/zero named by mistake).
inline constexpr std::size_t kMaxFileBytes = std::size_t{1} << 30;
// The whole content of the file at `path` (anything open(2) and read(2) accept: a FIFO or /dev/stdin too),
// at most `max_bytes` of it: a longer one is an error that says so.
FileText ReadWholeFile(const std::string& path, std::size_t max_bytes = kMaxFileBytes);
// ReadWholeFile, or everything on standard input when `path` is "-" (the tools' `--cluster -`).
FileText ReadInput(const std::string& path);

// Replaces `path` with a regular file holding `content` and permission bits `mode`: written to a new file in
// the same directory (O_CREAT|O_EXCL|O_NOFOLLOW, so nothing existing is opened or followed), fsynced, then
// renamed over `path`. A symlink at `path` is replaced, never written through; a reader sees the old file or
// the whole new one. Errors name `what` and `path`.
Result<void> ReplaceFile(const std::string& path, std::string_view content, mode_t mode,
                         std::string_view what);

}  // namespace hami::k8s
