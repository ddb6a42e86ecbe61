#pragma once
// Plain-text tables for the terminal (demo's summary, simulate -o table): each column as wide as its widest
// cell, header included, so long device IDs or pod names never push a row out of line.
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_state.h"

namespace hami::cmd {

class TextTable {
 public:
  // `right`: per column, whether it is aligned right (numbers); missing entries are left-aligned.
  explicit TextTable(std::vector<std::string> header, std::vector<bool> right = {});
  // A row of at most as many cells as the header (missing cells are empty). Control characters in a cell
  // are escaped: names from a snapshot file reach the terminal as text.
  void Add(std::vector<std::string> row);
  // Every line starts with `indent`; columns are two spaces apart; the last column is not padded.
  std::string Render(std::string_view indent = "") const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// Every device of `state`, node by node: its vendor, ID, type, and tasks, memory and cores used against
// what it has; "unhealthy" in the last column for a card its plugin reports so.
TextTable DeviceUsageTable(const ClusterState& state);

}  // namespace hami::cmd
