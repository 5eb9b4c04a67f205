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
  // operation never completed, because finalising would wait for the stuck rank, and
  // while an exception unwinds (the other ranks may be mid-collective: finalising would
  // wait for them); end_mpi_job_after_error() then ends the job.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

 private:
  bool owner_ = false;
  int rank_ = 0, size_ = 1;
};

// After an error has been printed (or left to another rank to print): ends the job so
// that no rank waits for this one. With MPI initialised and not finalised, a world of
// more than one rank is aborted (MPI_Abort with `code`: mpirun ends every rank and exits
// with it); one rank finalises. Without MPI, nothing.
void end_mpi_job_after_error(int code);
// MPI is initialised and not finalised, in a world of more than one rank.
bool mpi_job_running();

// The world of all MPI ranks ("world"), on a duplicate of MPI_COMM_WORLD.
// Collective over all ranks; needs an MpiRuntime.
std::unique_ptr<Communicator> mpi_world(Options options = {});

}  // namespace kiri::comm
