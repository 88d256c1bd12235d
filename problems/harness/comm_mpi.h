// Comm over OpenMPI, for CPU tensors: runs every reference on machines without a GPU.
// bf16/fp16 sums use a user-defined MPI operation that adds in fp32 and rounds at every
// pairwise step, as NCCL's bf16 reductions round at every hop.
#ifndef PKB_PROBLEMS_HARNESS_COMM_MPI_H_
#define PKB_PROBLEMS_HARNESS_COMM_MPI_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "problems/harness/comm.h"
#include "problems/harness/problem.h"

namespace pkb {

// Initializes MPI if needed (MPI_Init_thread) and returns the WORLD communicator with one
// sub-communicator per layout. MPI is finalized at process exit.
absl::StatusOr<std::unique_ptr<Comm>> MakeMpiWorld(const std::vector<GroupLayout>& groups);

// Rank and size of MPI_COMM_WORLD (initializing MPI).
int MpiWorldRank();
int MpiWorldSize();
// Finalizes MPI now (processes that leave through _Exit skip the atexit handler).
void FinalizeMpi();

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_COMM_MPI_H_
