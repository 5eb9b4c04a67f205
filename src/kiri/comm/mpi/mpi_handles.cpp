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

// MPI user ops for the 16-bit floats: 16 bits in, f32 arithmetic, 16 bits
// out (rounded at each step of MPI's reduction tree, as NCCL does). Codec:
// Bf16Codec or F16Codec.
struct Bf16Codec {
  static constexpr const char* kName = "bf16";
  static float load(uint16_t v) { return bf16_to_float(v); }
  static uint16_t store(float f) { return float_to_bf16(f); }
};
struct F16Codec {
  static constexpr const char* kName = "f16";
  static float load(uint16_t v) { return half_to_float(v); }
  static uint16_t store(float f) { return float_to_half(f); }
};

template <typename Codec>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = Codec::store(Codec::load(a[i]) + Codec::load(b[i]));
}
template <typename Codec>
void half_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    if (Codec::load(a[i]) > Codec::load(b[i])) b[i] = a[i];
}

// A 16-bit float's datatype and ops, created on first use.
struct HalfType {
  MpiType type;
  MpiOp sum, max;
};
template <typename Codec>
std::unique_ptr<HalfType>& half_slot() {
  static std::unique_ptr<HalfType> slot;
  return slot;
}

template <typename Codec>
const HalfType& half_type() {
  auto& slot = half_slot<Codec>();
  if (!slot) {
    const std::string name = Codec::kName;
    auto h = std::make_unique<HalfType>();
    MPI_Datatype t;
    mpi_check(MPI_Type_contiguous(2, MPI_BYTE, &t), "MPI_Type_contiguous", "for " + name);
    MPI_Type_set_name(t, const_cast<char*>(("kiri_" + name).c_str()));
    mpi_check(MPI_Type_commit(&t), "MPI_Type_commit", "for " + name);
    h->type = MpiType(t);
    MPI_Op op;
    mpi_check(MPI_Op_create(half_sum<Codec>, 1, &op), "MPI_Op_create", "for the " + name + " sum");
    h->sum = MpiOp(op);
    mpi_check(MPI_Op_create(half_max<Codec>, 1, &op), "MPI_Op_create", "for the " + name + " max");
    h->max = MpiOp(op);
    slot = std::move(h);
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
      return half_type<Bf16Codec>().type.get();
    case DType::kF16:
      return half_type<F16Codec>().type.get();
    case DType::kU16:
      return MPI_UINT16_T;
    case DType::kU8:
      return MPI_UINT8_T;
  }
  KIRI_RAISE(kInternal, "no MPI type for dtype ", static_cast<int>(dtype));
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::kBF16 || dtype == DType::kF16) {
    const HalfType& h = dtype == DType::kBF16 ? half_type<Bf16Codec>() : half_type<F16Codec>();
    return op == ReduceOp::kMax ? h.max.get() : h.sum.get();
  }
  return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
}

void release_mpi_types() {
  half_slot<Bf16Codec>().reset();
  half_slot<F16Codec>().reset();
}

void note_abandoned(int count) {
  g_abandoned += count;
}

int abandoned_operations() {
  return g_abandoned.load();
}

}  // namespace kiri::comm::detail
