#include "kiri/comm/mpi/mpi_handles.h"

#include <atomic>
#include <memory>

namespace kiri::comm::detail {

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void mpi_check(int code, const char* call, const std::string& context) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  int cls = MPI_ERR_OTHER;
  MPI_Error_class(code, &cls);
  const std::string message = str(call, " failed ", context, ": ", text, " (MPI error ", code, ")");
  ErrorKind kind = ErrorKind::kCommAborted;
  if (cls == MPI_ERR_TRUNCATE) kind = ErrorKind::kCommMismatch;
  if (cls == MPI_ERR_ARG || cls == MPI_ERR_COUNT || cls == MPI_ERR_TYPE || cls == MPI_ERR_TAG ||
      cls == MPI_ERR_RANK || cls == MPI_ERR_ROOT || cls == MPI_ERR_BUFFER || cls == MPI_ERR_OP)
    kind = ErrorKind::kInvalidArgument;
  raise(kind, message, __FILE__, __LINE__);
}

namespace {

// MPI user ops: bf16 in, f32 arithmetic, bf16 out (rounded at each step of
// MPI's reduction tree, as NCCL does).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    if (bf16_to_float(a[i]) > bf16_to_float(b[i])) b[i] = a[i];
}

struct Bf16 {
  MpiType type;
  MpiOp sum, max;
};
std::unique_ptr<Bf16>& bf16_slot() {
  static std::unique_ptr<Bf16> slot;
  return slot;
}

const Bf16& bf16() {
  auto& slot = bf16_slot();
  if (!slot) {
    auto b = std::make_unique<Bf16>();
    MPI_Datatype t;
    mpi_check(MPI_Type_contiguous(2, MPI_BYTE, &t), "MPI_Type_contiguous", "for bf16");
    MPI_Type_set_name(t, const_cast<char*>("kiri_bf16"));
    mpi_check(MPI_Type_commit(&t), "MPI_Type_commit", "for bf16");
    b->type = MpiType(t);
    MPI_Op op;
    mpi_check(MPI_Op_create(bf16_sum, 1, &op), "MPI_Op_create", "for the bf16 sum");
    b->sum = MpiOp(op);
    mpi_check(MPI_Op_create(bf16_max, 1, &op), "MPI_Op_create", "for the bf16 max");
    b->max = MpiOp(op);
    slot = std::move(b);
  }
  return *slot;
}

std::atomic<int> g_abandoned{0};

}  // namespace

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kBF16:
      return bf16().type.get();
    case DType::kF16:
    case DType::kU16:
      return MPI_UINT16_T;
    case DType::kU8:
      return MPI_UINT8_T;
  }
  KIRI_RAISE(kInternal, "no MPI type for dtype ", static_cast<int>(dtype));
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::kBF16) return op == ReduceOp::kMax ? bf16().max.get() : bf16().sum.get();
  return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
}

void release_mpi_types() {
  bf16_slot().reset();
}

void note_abandoned(int count) {
  g_abandoned += count;
}

int abandoned_operations() {
  return g_abandoned.load();
}

}  // namespace kiri::comm::detail
