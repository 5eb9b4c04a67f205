#pragma once
// The world a command runs in: under mpirun/srun (kiri launch) it is MPI's,
// otherwise a single process.
#include <memory>

#include "kiri/comm/communicator.h"
#include "kiri/comm/mpi/mpi_runtime.h"

namespace kiri::cli {

struct World {
  std::unique_ptr<comm::MpiRuntime> mpi;  // initialised first, finalised last
  std::unique_ptr<comm::Communicator> comm;
};

World make_world();

}  // namespace kiri::cli
