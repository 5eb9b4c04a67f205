// Small row ops the model used to run as its own loops (model/gpt.cpp): serial, in order,
// exactly as they were there, so the golden runs stay bitwise equal.
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

template <typename T>
double sum_in_order(const Tensor& x) {
  detail::check_dtype<T>(x, "sum_in_order", "x");
  const int64_t n = x.numel();
  const T* v = x.data<T>();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(v[i]);
  return sum;
}

void add_position_rows(Tensor& rows, const Tensor& pos_table, int64_t first, int64_t seq) {
  const char* op = "add_position_rows";
  detail::check_dtype<float>(rows, op, "rows");
  const int64_t c = detail::last_dim(rows, op, "rows");
  detail::check_dtype<float>(pos_table, op, "pos_table");
  KIRI_CHECK(pos_table.rank() == 2 && pos_table.dim(1) == c && pos_table.dim(0) >= seq && seq > 0 &&
                 first >= 0,
             op, ": pos_table ", pos_table.shape().str(), " for rows ", rows.shape().str(),
             ", first ", first, ", seq ", seq);
  const int64_t n = detail::rows_of(rows);
  float* xd = rows.data<float>();
  const float* pd = pos_table.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* pos = pd + ((first + i) % seq) * c;
    for (int64_t j = 0; j < c; ++j) xd[i * c + j] += pos[j];
  }
}

template double sum_in_order<float>(const Tensor&);
template double sum_in_order<double>(const Tensor&);

}  // namespace kiri::kernels::cpu
