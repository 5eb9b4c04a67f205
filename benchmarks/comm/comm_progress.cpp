// MPI advances a non-blocking collective only inside MPI calls. Starts a
// 16 MiB all_reduce, computes for ~100 ms (polling progress() every ~1 ms, or
// not at all), then times wait(). Run: mpirun -n 2 build/benchmarks/comm/comm_progress
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "kiri/base/timer.h"
#include "kiri/comm/mpi/mpi_runtime.h"

using namespace kiri;

namespace {

// ~compute_s of arithmetic, calling poll() every ~1 ms when it is set.
double compute(double compute_s, comm::Communicator* poll) {
  Timer total, since_poll;
  double acc = 0;
  while (total.seconds() < compute_s) {
    for (int i = 0; i < 2000; ++i) acc += std::sqrt(acc + i);
    if (poll && since_poll.seconds() >= 1e-3) {
      poll->progress();
      since_poll.reset();
    }
  }
  return acc;
}

}  // namespace

int main() {
  comm::MpiRuntime runtime;
  auto world = comm::mpi_world();
  Allocator allocator;
  Tensor t = Tensor::zeros({4 << 20}, DType::kF32, Category::kBuffers, allocator);  // 16 MiB
  double sink = 0;
  for (int round = 0; round < 4; ++round)
    for (bool poll : {false, true}) {
      world->barrier();
      Timer blocking;
      world->all_reduce(t, comm::ReduceOp::kSum);
      const double alone = blocking.seconds();
      world->barrier();
      comm::WorkHandle w = world->all_reduce_async(t, comm::ReduceOp::kSum);
      sink += compute(0.1, poll ? world.get() : nullptr);
      Timer waiting;
      w->wait();
      const double wait_s = waiting.seconds();
      if (world->rank() == 0 && round > 0)
        std::printf("%-22s blocking all_reduce %.1f ms, wait() after 100 ms of compute %.1f ms\n",
                    poll ? "progress() every 1 ms:" : "no progress():", alone * 1e3, wait_s * 1e3);
    }
  return sink == 42 ? 1 : 0;
}
