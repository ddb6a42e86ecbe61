#pragma once
// The /ui/ page's files (ui/ in the source tree), compiled into the binary by CMake: nothing is read from
// disk or the internet when the page is served.
#include <span>
#include <string_view>

namespace hami::extender {

struct UiAsset {
  std::string_view path;  // "/ui/", "/ui/app.js", ...
  std::string_view content_type;
  std::string_view body;
};

std::span<const UiAsset> UiAssets();

}  // namespace hami::extender
