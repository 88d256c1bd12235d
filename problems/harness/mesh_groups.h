// The sub-groups of a 2-D rank mesh, for problems that combine two kinds of parallelism
// (TP x CP, CP x PP, EP x FSDP, ...).
//
// Ranks are numbered row-major, rank = row * cols + col, as PKB's builders lay out their meshes:
//
//   std::vector<GroupLayout> Groups(const RunConfig& cfg) const override {
//     return MeshGroups(/*rows=*/cp, /*cols=*/tp, "tp", "cp");
//   }
//
// gives "tp" = {0, 1}, {2, 3}, ... (the consecutive ranks of each row) and "cp" = {0, 2, ...},
// {1, 3, ...} (each column, stride cols).
#ifndef PKB_PROBLEMS_HARNESS_MESH_GROUPS_H_
#define PKB_PROBLEMS_HARNESS_MESH_GROUPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "problems/harness/problem.h"

namespace pkb {

// {row groups named `row_name`, column groups named `col_name`} of a rows x cols mesh.
std::vector<GroupLayout> MeshGroups(int64_t rows, int64_t cols, std::string row_name,
                                    std::string col_name);

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_MESH_GROUPS_H_
