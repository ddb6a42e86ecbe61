#pragma once
// Writing files the user names on the command line (kubeconfigs, which hold credentials).
#include <sys/types.h>

#include <string>
#include <string_view>

#include "core/result.h"

namespace hami::k8s {

// Replaces `path` with a regular file holding `content` and permission bits `mode`: written to a new file in
// the same directory (O_CREAT|O_EXCL|O_NOFOLLOW, so nothing existing is opened or followed), fsynced, then
// renamed over `path`. A symlink at `path` is replaced, never written through; a reader sees the old file or
// the whole new one. Errors name `what` and `path`.
Result<void> ReplaceFile(const std::string& path, std::string_view content, mode_t mode,
                         std::string_view what);

}  // namespace hami::k8s
