#pragma once
// The inside of chat_template.cpp (private to the data layer): the values, expressions and
// nodes of kiri's Jinja subset, parsed by chat_template_parse.cpp and rendered by
// chat_template.cpp.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiri/data/sft.h"

namespace kiri::data {

namespace jinja {

// A value of the subset: none, a bool, an integer, a string kept as spans (so that an
// assistant's content stays counted through + and trim), a list or a map.
struct Value {
  enum class Type { kNone, kBool, kInt, kStr, kList, kMap };
  Type type = Type::kNone;
  bool b = false;
  int64_t i = 0;
  std::vector<TextSpan> s;
  std::shared_ptr<std::vector<Value>> list;
  std::shared_ptr<std::map<std::string, Value>> map;

  static Value str(std::string text, bool counted = false) {
    Value v;
    v.type = Type::kStr;
    if (!text.empty()) v.s.push_back({std::move(text), counted});
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.type = Type::kBool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.type = Type::kInt;
    v.i = x;
    return v;
  }
};

struct Expr {
  enum class Kind { kLit, kVar, kAttr, kIndex, kFilter, kBinary, kNot };
  Kind kind = Kind::kLit;
  Value lit;
  std::string name;  // variable, attribute, filter or operator
  std::unique_ptr<Expr> a, b;
};
using ExprPtr = std::unique_ptr<Expr>;

}  // namespace jinja

struct ChatTemplateNode {
  enum class Kind { kText, kOutput, kFor, kIf, kSet };
  Kind kind = Kind::kText;
  std::string text;     // kText: the text; kFor, kSet: the variable
  jinja::ExprPtr expr;  // kOutput, kFor (the sequence), kSet (the value)
  std::vector<std::unique_ptr<ChatTemplateNode>> body;
  // kIf: the conditions and their bodies in order; a final else has no condition.
  std::vector<std::pair<jinja::ExprPtr, std::vector<std::unique_ptr<ChatTemplateNode>>>> branches;
};

namespace jinja {

using Nodes = std::vector<std::unique_ptr<ChatTemplateNode>>;

// Parses {{ }}'s expression (kData naming `where` on anything outside the subset).
ExprPtr parse_expr(std::string_view s, const std::string& where);
// Parses a whole template (kData naming `label` and the construct).
Nodes parse_template(const std::string& source, const std::string& label);

}  // namespace jinja
}  // namespace kiri::data
