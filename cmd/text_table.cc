#include "cmd/text_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "k8s/logging.h"

namespace hami::cmd {

namespace {

// Columns on a terminal: one per UTF-8 code point (continuation bytes take none).
std::size_t Width(std::string_view s) {
  const auto starts_a_code_point = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; };
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), starts_a_code_point));
}

}  // namespace

TextTable::TextTable(std::vector<std::string> header, std::vector<bool> right)
    : header_(std::move(header)), right_(std::move(right)) {
  right_.resize(header_.size(), false);
}

void TextTable::Add(std::vector<std::string> row) {
  row.resize(header_.size());
  for (std::string& cell : row) cell = k8s::EscapeControlChars(cell);
  rows_.push_back(std::move(row));
}

std::string TextTable::Render(std::string_view indent) const {
  std::vector<std::size_t> widths(header_.size(), 0);
  const auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], Width(row[c]));
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::string out;
  const auto line = [&](const std::vector<std::string>& row) {
    std::string text(indent);
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::size_t pad = widths[c] - Width(row[c]);
      const bool last = c + 1 == row.size();
      if (c > 0) text += "  ";
      if (right_[c]) text.append(pad, ' ');
      text += row[c];
      if (!right_[c] && !last) text.append(pad, ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  line(header_);
  for (const auto& row : rows_) line(row);
  return out;
}

TextTable DeviceUsageTable(const ClusterState& state) {
  TextTable table({"NODE", "VENDOR", "DEVICE", "TYPE", "TASKS", "MEMORY MiB", "CORES", ""},
                  {false, false, false, false, true, true, true, false});
  for (const auto& name : state.NodeNames()) {
    const NodeEntry* e = state.FindNode(name);
    for (std::size_t i = 0; i < e->devices.size(); ++i) {
      const DeviceInfo& d = e->devices[i];
      const DeviceUsage& u = e->usage[i];
      table.Add({name, d.vendor, d.id, d.type, fmt::format("{}/{}", u.used, d.count),
                 fmt::format("{}/{}", u.mem.value(), d.devmem.value()),
                 fmt::format("{}/{}", u.cores.value(), d.devcore.value()), d.health ? "" : "unhealthy"});
    }
  }
  return table;
}

}  // namespace hami::cmd
