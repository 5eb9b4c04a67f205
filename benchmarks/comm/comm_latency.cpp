// Per-call overhead: a 4-byte all_reduce through kiri (agreement on and off)
// against MPI's own blocking and non-blocking calls.
// Run: mpirun -n 2 build/benchmarks/comm/comm_latency
#include <mpi.h>

#include <cstdio>

#include "kiri/base/timer.h"
#include "kiri/comm/mpi/mpi_runtime.h"

using namespace kiri;

int main() {
  comm::MpiRuntime runtime;
  auto world = comm::mpi_world();
  Allocator allocator;
  Tensor t = Tensor::zeros({1}, DType::kF32, Category::kBuffers, allocator);
  const int n = 5000;
  auto report = [&](const char* what, double s) {
    if (world->rank() == 0) std::printf("%-44s %.1f us\n", what, s / n * 1e6);
  };
  for (int round = 0; round < 2; ++round) {  // the first round warms up
    for (bool check : {true, false}) {
      comm::Options o;
      o.check_collectives = check;
      world->set_options(o);
      world->barrier();
      Timer timer;
      for (int i = 0; i < n; ++i) world->all_reduce(t, comm::ReduceOp::kSum);
      if (round)
        report(check ? "kiri all_reduce, check_collectives on"
                     : "kiri all_reduce, check_collectives off",
               timer.seconds());
    }
    float x = 0;
    world->barrier();
    Timer nonblocking;
    for (int i = 0; i < n; ++i) {
      MPI_Request r;
      int done = 0;
      MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
      while (!done) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
    if (round) report("MPI_Iallreduce + MPI_Test loop", nonblocking.seconds());
    world->barrier();
    Timer blocking;
    for (int i = 0; i < n; ++i)
      MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (round) report("MPI_Allreduce", blocking.seconds());
  }
  return 0;
}
