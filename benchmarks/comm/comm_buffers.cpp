// Times a 256 MiB f32 all_reduce (MPI_Iallreduce) with glibc tuned by
// MpiRuntime (large blocks stay mapped) or untuned (MPI initialised before
// MpiRuntime, so it leaves malloc alone), and counts the page faults.
// Run: mpirun -n 2 build/benchmarks/comm/comm_buffers tuned|untuned
#include <mpi.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>

#include "kiri/base/timer.h"
#include "kiri/comm/mpi/mpi_runtime.h"

using namespace kiri;

namespace {
long minor_faults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
}  // namespace

int main(int argc, char** argv) {
  const bool tuned = argc < 2 || std::strcmp(argv[1], "untuned") != 0;
  if (!tuned) MPI_Init(&argc, &argv);
  {
    comm::MpiRuntime runtime;
    auto world = comm::mpi_world();
    Allocator allocator;
    Tensor t = Tensor::zeros({64 << 20}, DType::kF32, Category::kBuffers, allocator);
    double total = 0;
    const int iters = 6;
    for (int i = 0; i < iters; ++i) {
      world->barrier();
      const long faults = minor_faults();
      Timer timer;
      world->all_reduce(t, comm::ReduceOp::kSum);
      const double s = timer.seconds();
      if (i > 0) total += s;
      if (world->rank() == 0)
        std::printf("%s call %d: %.3f s, %ld page faults\n", tuned ? "tuned" : "untuned", i, s,
                    minor_faults() - faults);
    }
    if (world->rank() == 0)
      std::printf("%s mean of calls 1..%d: %.3f s (%d ranks)\n", tuned ? "tuned" : "untuned",
                  iters - 1, total / (iters - 1), world->size());
  }
  if (!tuned) MPI_Finalize();
  return 0;
}
