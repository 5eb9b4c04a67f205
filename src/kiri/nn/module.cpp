#include "kiri/nn/module.h"

#include <algorithm>

namespace kiri::nn {

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& p : params_) out.push_back(p.get());
  for (Module* c : children_) {
    std::vector<Parameter*> sub = c->parameters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Parameter& Module::add_parameter(const std::string& local, const Shape& shape, bool weight_decay,
                                 InitSpec init, const Shape& full, TpSplit tp) {
  auto p = std::make_unique<Parameter>();
  p->name = child_name(local);
  p->shape = shape;
  p->full = full.rank() ? full : shape;
  p->tp = tp;
  p->weight_decay = weight_decay;
  p->init = init;
  params_.push_back(std::move(p));
  return *params_.back();
}

std::vector<ElementRun> element_runs(const Parameter& p) {
  const int64_t n = p.numel();
  if (p.tp.dim < 0) return {{0, 0, n}};
  const TpSplit& t = p.tp;
  std::vector<ElementRun> runs;
  if (t.dim == 0 && p.shape.rank() == 1) {  // a cut vector: block by block
    const int64_t block = p.full[0] / t.blocks, part = block / t.parts;
    for (int k = 0; k < t.blocks; ++k) runs.push_back({k * part, k * block + t.index * part, part});
    return runs;
  }
  if (t.dim == 0) {  // rows [index * R, (index + 1) * R); padding rows past full[0] map to none
    const int64_t rows = p.shape[0], width = n / rows;
    const int64_t real = std::max<int64_t>(0, std::min(rows, p.full[0] - t.index * rows));
    if (real > 0) runs.push_back({0, t.index * rows * width, real * width});
    return runs;
  }
  // dim 1: columns of every row, block by block
  const int64_t rows = p.shape[0], cols = p.shape[1], full_cols = p.full[1];
  const int64_t block = full_cols / t.blocks, part = block / t.parts;
  for (int64_t r = 0; r < rows; ++r)
    for (int k = 0; k < t.blocks; ++k)
      runs.push_back({r * cols + k * part, r * full_cols + k * block + t.index * part, part});
  return runs;
}

Tensor activation(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, Category::kActivations, ctx.allocator);
}

Tensor activation_zeros(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::zeros(shape, dtype, Category::kActivations, ctx.allocator);
}

}  // namespace kiri::nn
