#pragma once
// MPI handles with owners, MPI error codes as kiri errors, and the MPI
// datatypes and reduction ops for kiri's dtypes (bf16 and f16: each a 2-byte
// type with user ops that reduce in f32).
#include <mpi.h>

#include <string>
#include <utility>

#include "kiri/comm/communicator.h"

namespace kiri::comm::detail {

bool mpi_finalized();

// Turns an MPI error code into a kiri error: kCommMismatch for truncation
// (sizes differ), kInvalidArgument for bad arguments, kCommAborted otherwise.
void mpi_check(int code, const char* call, const std::string& context);

// Tag types, because MPICH's handles are all plain ints.
struct CommHandle {
  using type = MPI_Comm;
  static type null() { return MPI_COMM_NULL; }
  static void free(type* h) { MPI_Comm_free(h); }
};
struct OpHandle {
  using type = MPI_Op;
  static type null() { return MPI_OP_NULL; }
  static void free(type* h) { MPI_Op_free(h); }
};
struct TypeHandle {
  using type = MPI_Datatype;
  static type null() { return MPI_DATATYPE_NULL; }
  static void free(type* h) { MPI_Type_free(h); }
};

// Frees its handle on destruction (unless MPI is already finalised).
template <typename Tag>
class MpiHandle {
 public:
  using type = typename Tag::type;
  MpiHandle() = default;
  explicit MpiHandle(type h) : h_(h) {}
  ~MpiHandle() { reset(); }
  MpiHandle(MpiHandle&& o) noexcept : h_(std::exchange(o.h_, Tag::null())) {}
  MpiHandle& operator=(MpiHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, Tag::null());
    }
    return *this;
  }
  MpiHandle(const MpiHandle&) = delete;
  MpiHandle& operator=(const MpiHandle&) = delete;

  type get() const { return h_; }
  void reset() {
    if (h_ != Tag::null() && !mpi_finalized()) Tag::free(&h_);
    h_ = Tag::null();
  }

 private:
  type h_ = Tag::null();
};
using MpiComm = MpiHandle<CommHandle>;
using MpiOp = MpiHandle<OpHandle>;
using MpiType = MpiHandle<TypeHandle>;

MPI_Datatype mpi_type(DType dtype);
// avg travels as a sum; the caller divides.
MPI_Op mpi_op(DType dtype, ReduceOp op);
// Frees the bf16 and f16 types and ops (MpiRuntime, before MPI_Finalize).
void release_mpi_types();

// Operations that never completed (their communicator was destroyed first):
// MpiRuntime does not finalise then.
void note_abandoned(int count);
int abandoned_operations();

}  // namespace kiri::comm::detail
