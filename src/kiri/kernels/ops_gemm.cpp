#include "kiri/kernels/ops.h"

#include "kiri/kernels/cpu/ops.h"

// The raw-pointer GEMMs (gemm, gemm_lowp, gemm_bf16) and the CPU GEMM settings have no
// tensor to ask for a device: their pointers are host memory, so they go to the CPU backend.
namespace kiri::kernels {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  return cpu::gemm<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_lowp(DType ab, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
               DType c_dtype, int64_t ldc) {
  return cpu::gemm_lowp(ab, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dtype,
                        ldc);
}

void set_gemm_lowp_impl(LowpGemmImpl impl) {
  return cpu::set_gemm_lowp_impl(impl);
}

LowpGemmImpl gemm_lowp_impl() {
  return cpu::gemm_lowp_impl();
}

const char* gemm_lowp_impl_name(LowpGemmImpl impl) {
  return cpu::gemm_lowp_impl_name(impl);
}

LowpGemmImpl parse_gemm_lowp_impl(const std::string& name) {
  return cpu::parse_gemm_lowp_impl(name);
}

bool gemm_lowp_available(LowpGemmImpl impl, DType ab) {
  return cpu::gemm_lowp_available(impl, ab);
}

const std::string& gemm_lowp_onednn_kernel(DType ab) {
  return cpu::gemm_lowp_onednn_kernel(ab);
}

LowpGemmImpl gemm_lowp_path(DType ab) {
  return cpu::gemm_lowp_path(ab);
}

std::string gemm_lowp_path_description(DType ab) {
  return cpu::gemm_lowp_path_description(ab);
}

std::vector<LowpGemmShape> linear_gemm_shapes(int64_t tokens, int64_t in, int64_t out, bool out_in,
                                              const std::string& name) {
  return cpu::linear_gemm_shapes(tokens, in, out, out_in, name);
}

std::string gemm_lowp_cache_path() {
  return cpu::gemm_lowp_cache_path();
}

LowpGemmRates measure_gemm_lowp_rates(DType ab, const std::vector<LowpGemmShape>& shapes) {
  return cpu::measure_gemm_lowp_rates(ab, shapes);
}

void set_gemm_lowp_rates(const LowpGemmRates& rates) {
  return cpu::set_gemm_lowp_rates(rates);
}

void clear_gemm_lowp_rates() {
  return cpu::clear_gemm_lowp_rates();
}

LowpGemmRates gemm_lowp_rates(DType ab) {
  return cpu::gemm_lowp_rates(ab);
}

void record_gemm_lowp_calls(std::vector<LowpGemmCall>* into) {
  return cpu::record_gemm_lowp_calls(into);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  return cpu::gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The scalars the callers use: float for training, double for the gradient checks.
template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

}  // namespace kiri::kernels
