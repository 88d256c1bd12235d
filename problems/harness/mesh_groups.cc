#include "problems/harness/mesh_groups.h"

#include <utility>

namespace pkb {

std::vector<GroupLayout> MeshGroups(int64_t rows, int64_t cols, std::string row_name,
                                    std::string col_name) {
  GroupLayout by_row{std::move(row_name), {}}, by_col{std::move(col_name), {}};
  for (int64_t r = 0; r < rows; ++r) {
    by_row.partition.emplace_back();
    for (int64_t c = 0; c < cols; ++c) by_row.partition.back().push_back(r * cols + c);
  }
  for (int64_t c = 0; c < cols; ++c) {
    by_col.partition.emplace_back();
    for (int64_t r = 0; r < rows; ++r) by_col.partition.back().push_back(r * cols + c);
  }
  return {by_row, by_col};
}

}  // namespace pkb
