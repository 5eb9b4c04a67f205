#include "kiri/data/chat_template.h"

#include <cctype>
#include <map>
#include <memory>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/chat_template_ast.h"

namespace kiri::data {

namespace {

using namespace jinja;  // NOLINT: the subset's own types, private to the data layer

const char* type_name(Value::Type t) {
  static const char* const names[] = {"none", "bool", "integer", "string", "list", "map"};
  return names[static_cast<int>(t)];
}

bool truthy(const Value& v) {
  switch (v.type) {
    case Value::Type::kNone:
      return false;
    case Value::Type::kBool:
      return v.b;
    case Value::Type::kInt:
      return v.i != 0;
    case Value::Type::kStr:
      return !join_spans(v.s).empty();
    case Value::Type::kList:
      return !v.list->empty();
    case Value::Type::kMap:
      return !v.map->empty();
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::kNone:
      return true;
    case Value::Type::kBool:
      return a.b == b.b;
    case Value::Type::kInt:
      return a.i == b.i;
    case Value::Type::kStr:
      return join_spans(a.s) == join_spans(b.s);
    default:
      return a.list == b.list && a.map == b.map;  // the same object
  }
}

// Jinja's trim: whitespace off both ends, across spans.
std::vector<TextSpan> trim(std::vector<TextSpan> s) {
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty()) {
    std::string& t = s.front().text;
    size_t k = 0;
    while (k < t.size() && space(t[k])) ++k;
    t.erase(0, k);
    if (!t.empty()) break;
    s.erase(s.begin());
  }
  while (!s.empty()) {
    std::string& t = s.back().text;
    size_t k = t.size();
    while (k > 0 && space(t[k - 1])) --k;
    t.resize(k);
    if (!t.empty()) break;
    s.pop_back();
  }
  return s;
}

class Renderer {
 public:
  explicit Renderer(const std::string& label) : label_(label) { scopes_.emplace_back(); }

  void set(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

  void run(const Nodes& nodes, std::vector<TextSpan>& out) {
    for (const auto& n : nodes) {
      switch (n->kind) {
        case ChatTemplateNode::Kind::kText:
          out.push_back({n->text, false});
          break;
        case ChatTemplateNode::Kind::kOutput:
          emit(eval(*n->expr), out);
          break;
        case ChatTemplateNode::Kind::kSet:
          set(n->text, eval(*n->expr));
          break;
        case ChatTemplateNode::Kind::kIf:
          for (const auto& [cond, body] : n->branches)
            if (!cond || truthy(eval(*cond))) {
              run(body, out);
              break;
            }
          break;
        case ChatTemplateNode::Kind::kFor:
          loop(*n, out);
          break;
      }
    }
  }

 private:
  void loop(const ChatTemplateNode& n, std::vector<TextSpan>& out) {
    const Value seq = eval(*n.expr);
    if (seq.type != Value::Type::kList)
      KIRI_RAISE(kData, label_, ": {% for ", n.text, " in ... %} over a ", type_name(seq.type),
                 " (kiri loops over lists)");
    const auto len = static_cast<int64_t>(seq.list->size());
    for (int64_t k = 0; k < len; ++k) {
      scopes_.emplace_back();  // the loop's own names: its variable, `loop`, its sets
      Value info;
      info.type = Value::Type::kMap;
      info.map = std::make_shared<std::map<std::string, Value>>();
      (*info.map)["index0"] = Value::integer(k);
      (*info.map)["index"] = Value::integer(k + 1);
      (*info.map)["first"] = Value::boolean(k == 0);
      (*info.map)["last"] = Value::boolean(k + 1 == len);
      (*info.map)["length"] = Value::integer(len);
      set("loop", info);
      set(n.text, (*seq.list)[static_cast<size_t>(k)]);
      run(n.body, out);
      scopes_.pop_back();
    }
  }

  void emit(const Value& v, std::vector<TextSpan>& out) const {
    if (v.type == Value::Type::kStr) {
      out.insert(out.end(), v.s.begin(), v.s.end());
    } else if (v.type == Value::Type::kInt) {
      out.push_back({std::to_string(v.i), false});
    } else if (v.type == Value::Type::kBool) {
      out.push_back({v.b ? "True" : "False", false});
    } else if (v.type != Value::Type::kNone) {
      KIRI_RAISE(kData, label_, ": {{ }} of a ", type_name(v.type), " (kiri prints strings)");
    }
  }

  Value member(const Value& obj, const Value& key) const {
    if (obj.type == Value::Type::kMap && key.type == Value::Type::kStr) {
      const auto it = obj.map->find(join_spans(key.s));
      return it == obj.map->end() ? Value() : it->second;
    }
    if (obj.type == Value::Type::kList && key.type == Value::Type::kInt) {
      const auto n = static_cast<int64_t>(obj.list->size());
      const int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) KIRI_RAISE(kData, label_, ": index ", key.i, " of a list of ", n);
      return (*obj.list)[static_cast<size_t>(k)];
    }
    KIRI_RAISE(kData, label_, ": a ", type_name(obj.type), " indexed by a ", type_name(key.type));
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLit:
        return e.lit;
      case Expr::Kind::kVar:
        for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
          if (const auto it = s->find(e.name); it != s->end()) return it->second;
        KIRI_RAISE(kData, label_, ": '", e.name,
                   "' is undefined (kiri defines messages, bos_token, eos_token, "
                   "add_generation_prompt)");
      case Expr::Kind::kAttr:
        return member(eval(*e.a), Value::str(e.name));
      case Expr::Kind::kIndex:
        return member(eval(*e.a), eval(*e.b));
      case Expr::Kind::kFilter: {
        Value v = eval(*e.a);
        if (v.type != Value::Type::kStr)
          KIRI_RAISE(kData, label_, ": trim of a ", type_name(v.type));
        v.s = trim(std::move(v.s));
        return v;
      }
      case Expr::Kind::kNot:
        return Value::boolean(!truthy(eval(*e.a)));
      case Expr::Kind::kBinary:
        return binary(e);
    }
    return Value();
  }

  Value binary(const Expr& e) {
    if (e.name == "and") {
      Value a = eval(*e.a);
      return truthy(a) ? eval(*e.b) : a;
    }
    if (e.name == "or") {
      Value a = eval(*e.a);
      return truthy(a) ? a : eval(*e.b);
    }
    const Value a = eval(*e.a), b = eval(*e.b);
    if (e.name == "==") return Value::boolean(equal(a, b));
    if (e.name == "!=") return Value::boolean(!equal(a, b));
    if (a.type == Value::Type::kInt && b.type == Value::Type::kInt)
      return Value::integer(a.i + b.i);
    if (a.type != Value::Type::kStr || b.type != Value::Type::kStr)
      KIRI_RAISE(kData, label_, ": ", type_name(a.type), " + ", type_name(b.type),
                 " (kiri adds strings to strings and integers to integers)");
    Value v = a;
    v.s.insert(v.s.end(), b.s.begin(), b.s.end());
    return v;
  }

  std::string label_;
  std::vector<std::map<std::string, Value>> scopes_;
};

// Counts an end-of-turn marker right after counted text, so the model learns to end a turn.
std::vector<TextSpan> count_turn_ends(const std::vector<TextSpan>& in) {
  std::vector<TextSpan> out;
  for (const TextSpan& s : in) {
    if (s.text.empty()) continue;
    if (!out.empty() && out.back().counted == s.counted) {
      out.back().text += s.text;
      continue;
    }
    out.push_back(s);
  }
  for (size_t k = 1; k < out.size(); ++k) {
    if (out[k].counted || !out[k - 1].counted) continue;
    for (const std::string marker : {"<|eot_id|>", "<|im_end|>"})
      if (out[k].text.rfind(marker, 0) == 0) {
        out[k - 1].text += marker;
        out[k].text.erase(0, marker.size());
        break;
      }
  }
  std::erase_if(out, [](const TextSpan& s) { return s.text.empty(); });
  return out;
}

}  // namespace

std::string join_spans(const std::vector<TextSpan>& spans) {
  std::string s;
  for (const TextSpan& t : spans) s += t.text;
  return s;
}

ChatTemplate::ChatTemplate(const std::string& source, const std::string& label) : label_(label) {
  body_ = parse_template(source, label);
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

std::vector<TextSpan> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                           const std::string& bos_token,
                                           const std::string& eos_token,
                                           bool add_generation_prompt) const {
  Renderer r(label_);
  Value list;
  list.type = Value::Type::kList;
  list.list = std::make_shared<std::vector<Value>>();
  for (const ChatMessage& m : messages) {
    Value v;
    v.type = Value::Type::kMap;
    v.map = std::make_shared<std::map<std::string, Value>>();
    (*v.map)["role"] = Value::str(m.role);
    (*v.map)["content"] = Value::str(m.content, m.role == "assistant");
    list.list->push_back(std::move(v));
  }
  r.set("messages", list);
  r.set("bos_token", Value::str(bos_token));
  r.set("eos_token", Value::str(eos_token));
  r.set("add_generation_prompt", Value::boolean(add_generation_prompt));
  std::vector<TextSpan> out;
  r.run(body_, out);
  return count_turn_ends(out);
}

TokenizerChatTemplate read_tokenizer_chat_template(const std::string& tokenizer_path) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::is_directory(tokenizer_path) ? fs::path(tokenizer_path)
                                                        : fs::path(tokenizer_path).parent_path();
  const std::string path = (dir / "tokenizer_config.json").string();
  if (!fs::exists(path))
    KIRI_RAISE(kData, "--chat-template tokenizer: ", path,
               " does not exist (a Hugging Face tokenizer folder keeps its chat template there)");
  const nlohmann::json j = nlohmann::json::parse(
      read_small_file(path, uint64_t{16} << 20, ErrorKind::kData, "tokenizer config"), nullptr,
      /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) KIRI_RAISE(kData, path, " is not a JSON object");
  if (!j.contains("chat_template"))
    KIRI_RAISE(kData, path, " has no chat_template (use --chat-template simple)");
  if (!j["chat_template"].is_string())
    KIRI_RAISE(kData, path, ": chat_template is a ", j["chat_template"].type_name(),
               " (named templates); kiri renders one template string");
  const auto token = [&](const char* key) -> std::string {
    if (!j.contains(key)) return "";
    const nlohmann::json& t = j[key];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_object() && t.contains("content") && t["content"].is_string())
      return t["content"].get<std::string>();
    return "";
  };
  return {j["chat_template"].get<std::string>(), token("bos_token"), token("eos_token")};
}

}  // namespace kiri::data
