#include "kiri/nn/parameter_store.h"

#include <set>

#include "kiri/base/rng.h"

namespace kiri::nn {

ParameterStore::ParameterStore(std::vector<Parameter*> params, DType dtype, Allocator& allocator)
    : params_(std::move(params)) {
  int64_t total = 0;
  std::set<std::string> names;
  for (Parameter* p : params_) {
    KIRI_CHECK(names.insert(p->name).second, "parameter name '", p->name, "' is used twice");
    p->offset = total;
    total += p->numel();
  }
  values_ = Tensor::empty({total}, dtype, Category::kParameters, allocator);
  grads_ = Tensor::zeros({total}, dtype, Category::kGradients, allocator);
  for (Parameter* p : params_) {
    p->value = values_.flat_range(p->offset, p->numel()).view(p->shape);
    p->grad = grads_.flat_range(p->offset, p->numel()).view(p->shape);
  }
}

Parameter* ParameterStore::find(const std::string& name) const {
  for (Parameter* p : params_)
    if (p->name == name) return p;
  return nullptr;
}

void ParameterStore::initialize(uint64_t seed) {
  for (Parameter* p : params_) init_values(p->value, p->init, seed, p->name);
}

void init_values(Tensor& t, const InitSpec& spec, uint64_t seed, const std::string& name,
                 int64_t first_index) {
  const int64_t n = t.numel();
  if (spec.kind != InitKind::kNormal) {
    t.fill_(spec.kind == InitKind::kOnes ? 1.0 : 0.0);
    return;
  }
  const uint64_t stream = hash_string(name);
  auto draw = [&](int64_t i) {
    return spec.std * random_normal(seed, stream, static_cast<uint64_t>(first_index + i));
  };
  if (t.dtype() == DType::kF32) {
    float* d = t.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(draw(i));
  } else if (t.dtype() == DType::kF64) {
    double* d = t.data<double>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = draw(i);
  } else {
    KIRI_RAISE(kInvalidArgument, "cannot initialise ", name, " in ", dtype_name(t.dtype()),
               " (F32 or F64 only)");
  }
}

}  // namespace kiri::nn
