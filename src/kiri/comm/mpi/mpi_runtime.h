#pragma once
// The MPI backend's entry points. One MpiRuntime per process, created before
// any MPI communicator and destroyed after the last one; all communication
// from the thread that created it (MPI_THREAD_FUNNELED).
#include <memory>

#include "kiri/comm/communicator.h"

namespace kiri::comm {

// True when the process was started by mpirun/mpiexec/srun (the launcher's
// environment variables: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK).
bool launched_by_mpi();

class MpiRuntime {
 public:
  // Initialises MPI unless it already is (then it leaves finalising to whoever
  // initialised it). Tunes glibc first so that MPI's large temporary buffers
  // stay mapped between collectives (docs/comm.md has the numbers).
  MpiRuntime();
  // Finalises MPI if it initialised it; skips MPI_Finalize (logging why) when an
  // operation never completed, because finalising would wait for the stuck rank.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

 private:
  bool owner_ = false;
  int rank_ = 0, size_ = 1;
};

// The world of all MPI ranks ("world"), on a duplicate of MPI_COMM_WORLD.
// Collective over all ranks; needs an MpiRuntime.
std::unique_ptr<Communicator> mpi_world(Options options = {});

}  // namespace kiri::comm
