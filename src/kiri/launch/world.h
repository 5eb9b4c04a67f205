#pragma once
// The world a command runs in: under mpirun/srun (kiri launch) it is MPI's,
// otherwise a single process.
#include <memory>

#include "kiri/comm/communicator.h"
#include "kiri/comm/mpi/mpi_runtime.h"

namespace kiri::launch {

struct World {
  std::unique_ptr<comm::MpiRuntime> mpi;  // initialised first, finalised last
  std::unique_ptr<comm::Communicator> comm;
};

World make_world();

// This process's rank in its job before (or without) MPI: the world's once make_world has
// run, else what mpirun / a PMI launcher / srun put in the environment
// (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID); -1 outside a job.
int job_rank();
// The job's size the same way (OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS); 1 outside one.
int job_size();

}  // namespace kiri::launch
