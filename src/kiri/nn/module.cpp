#include "kiri/nn/module.h"

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
                                 InitSpec init) {
  auto p = std::make_unique<Parameter>();
  p->name = child_name(local);
  p->shape = shape;
  p->weight_decay = weight_decay;
  p->init = init;
  params_.push_back(std::move(p));
  return *params_.back();
}

Tensor activation(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, Category::kActivations, ctx.allocator);
}

Tensor activation_zeros(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::zeros(shape, dtype, Category::kActivations, ctx.allocator);
}

}  // namespace kiri::nn
