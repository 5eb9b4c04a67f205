// kiri's Jinja subset: the template cut into text and tags, expressions parsed by precedence.
#include <cctype>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/chat_template_ast.h"

namespace kiri::data::jinja {

namespace {

enum class Tok { kName, kStr, kInt, kOp, kEnd };
struct Token {
  Tok kind;
  std::string text;
};

std::vector<Token> lex(std::string_view s, const std::string& where) {
  std::vector<Token> out;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::kName, std::string(s.substr(i, j - i))});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      out.push_back({Tok::kInt, std::string(s.substr(i, j - i))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 == s.size()) {
          text += s[j];
          continue;
        }
        const char e = s[++j];
        text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      if (j >= s.size()) KIRI_RAISE(kData, where, ": a string literal is not closed");
      out.push_back({Tok::kStr, std::move(text)});
      i = j + 1;
    } else if (s.substr(i, 2) == "==" || s.substr(i, 2) == "!=") {
      out.push_back({Tok::kOp, std::string(s.substr(i, 2))});
      i += 2;
    } else if (std::string_view("+|.[]()").find(c) != std::string_view::npos) {
      out.push_back({Tok::kOp, std::string(1, c)});
      ++i;
    } else {
      KIRI_RAISE(kData, where, ": the operator '", std::string(s.substr(i, 2)),
                 "' is not in kiri's Jinja subset (+ == != | . [] () and or not)");
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

// Precedence, lowest first: or, and, not, == !=, +, | filter, postfix . [], primary.
class ExprParser {
 public:
  ExprParser(std::vector<Token> toks, std::string where)
      : t_(std::move(toks)), where_(std::move(where)) {}

  ExprPtr parse_all() {
    ExprPtr e = parse_or();
    if (t_[p_].kind != Tok::kEnd)
      KIRI_RAISE(kData, where_, ": unexpected '", t_[p_].text,
                 "' (kiri's Jinja subset has no such expression)");
    return e;
  }

 private:
  bool accept(const char* text) {
    if (t_[p_].kind == Tok::kEnd || t_[p_].kind == Tok::kStr || t_[p_].text != text) return false;
    ++p_;
    return true;
  }
  void expect(const char* text) {
    if (!accept(text)) KIRI_RAISE(kData, where_, ": want '", text, "', got '", t_[p_].text, "'");
  }
  static ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kBinary;
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (accept("or")) e = binary("or", std::move(e), parse_and());
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (accept("and")) e = binary("and", std::move(e), parse_not());
    return e;
  }
  ExprPtr parse_not() {
    if (!accept("not")) return parse_compare();
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kNot;
    e->a = parse_not();
    return e;
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_add();
    for (const char* op : {"==", "!="})
      if (accept(op)) return binary(op, std::move(e), parse_add());
    return e;
  }
  ExprPtr parse_add() {
    ExprPtr e = parse_filter();
    while (accept("+")) e = binary("+", std::move(e), parse_filter());
    return e;
  }
  ExprPtr parse_filter() {
    ExprPtr e = parse_postfix();
    while (accept("|")) {
      const Token& f = t_[p_++];
      if (f.kind != Tok::kName || f.text != "trim")
        KIRI_RAISE(kData, where_, ": the filter '", f.text,
                   "' is not in kiri's Jinja subset (trim)");
      auto g = std::make_unique<Expr>();
      g->kind = Expr::Kind::kFilter;
      g->name = f.text;
      g->a = std::move(e);
      e = std::move(g);
    }
    return e;
  }
  ExprPtr parse_postfix() {
    ExprPtr e = parse_primary();
    for (;;) {
      auto g = std::make_unique<Expr>();
      if (accept(".")) {
        if (t_[p_].kind != Tok::kName) KIRI_RAISE(kData, where_, ": want a name after '.'");
        g->kind = Expr::Kind::kAttr;
        g->name = t_[p_++].text;
      } else if (accept("[")) {
        g->kind = Expr::Kind::kIndex;
        g->b = parse_or();
        expect("]");
      } else if (t_[p_].text == "(" && t_[p_].kind == Tok::kOp) {
        KIRI_RAISE(kData, where_, ": a call (", e->name,
                   "(...)) is not in kiri's Jinja subset: no functions or methods");
      } else {
        return e;
      }
      g->a = std::move(e);
      e = std::move(g);
    }
  }
  ExprPtr parse_primary() {
    const Token tok = t_[p_++];
    auto e = std::make_unique<Expr>();
    if (tok.kind == Tok::kStr) {
      e->lit = Value::str(tok.text);
    } else if (tok.kind == Tok::kInt) {
      e->lit = Value::integer(std::stoll(tok.text));
    } else if (tok.kind == Tok::kOp && tok.text == "(") {
      e = parse_or();
      expect(")");
    } else if (tok.kind == Tok::kName && (tok.text == "true" || tok.text == "True")) {
      e->lit = Value::boolean(true);
    } else if (tok.kind == Tok::kName && (tok.text == "false" || tok.text == "False")) {
      e->lit = Value::boolean(false);
    } else if (tok.kind == Tok::kName && (tok.text == "none" || tok.text == "None")) {
      e->lit = Value();
    } else if (tok.kind == Tok::kName && tok.text != "and" && tok.text != "or") {
      e->kind = Expr::Kind::kVar;
      e->name = tok.text;
    } else {
      KIRI_RAISE(kData, where_, ": unexpected '", tok.text, "'");
    }
    return e;
  }

  std::vector<Token> t_;
  std::string where_;
  size_t p_ = 0;
};

// The template cut into text, {{ }} and {% %} pieces, Jinja's whitespace control ({%- -%})
// applied to the text beside them.
struct Piece {
  char kind;  // 't' text, 'o' output, 's' statement
  std::string text;
};

std::vector<Piece> cut(const std::string& src, const std::string& label) {
  std::vector<Piece> out;
  bool strip_next = false;
  for (size_t i = 0; i < src.size();) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (strip_next)
      text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos
                        ? text.size()
                        : text.find_first_not_of(" \t\r\n"));
    const char kind = open == std::string::npos ? 0 : src[open + 1];
    const bool minus = kind && open + 2 < src.size() && src[open + 2] == '-';
    if (minus) text.erase(text.find_last_not_of(" \t\r\n") + 1);
    if (!text.empty()) out.push_back({'t', text});
    if (!kind) break;
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = src.find(close, open + 2);
    if (end == std::string::npos)
      KIRI_RAISE(kData, label, ": '", src.substr(open, 2), "' at offset ", open,
                 " is never closed");
    size_t b = open + 2 + (minus ? 1 : 0), e = end;
    strip_next = e > b && src[e - 1] == '-';
    if (strip_next) --e;
    if (kind != '#') out.push_back({kind == '{' ? 'o' : 's', src.substr(b, e - b)});
    i = end + 2;
  }
  return out;
}

std::string first_word(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = b;
  while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
  return s.substr(b, e - b);
}

std::string after_word(const std::string& s, const std::string& w) {
  return s.substr(s.find(w) + w.size());
}

class TemplateParser {
 public:
  TemplateParser(std::vector<Piece> pieces, std::string label)
      : p_(std::move(pieces)), label_(std::move(label)) {}

  // Nodes until one of the `stops` statements (returned in *stop, not consumed), or the end.
  Nodes parse(std::initializer_list<const char*> stops, std::string* stop) {
    Nodes out;
    for (; i_ < p_.size(); ++i_) {
      const Piece& pc = p_[i_];
      auto n = std::make_unique<ChatTemplateNode>();
      if (pc.kind == 't') {
        n->text = pc.text;
      } else if (pc.kind == 'o') {
        n->kind = ChatTemplateNode::Kind::kOutput;
        n->expr = parse_expr(pc.text, where(pc));
      } else {
        const std::string w = first_word(pc.text);
        for (const char* s : stops)
          if (w == s) {
            *stop = w;
            return out;
          }
        n = statement(pc, w);
      }
      out.push_back(std::move(n));
    }
    if (stops.size() > 0)
      KIRI_RAISE(kData, label_, ": a block is not closed (want {% ", *stops.begin(), " %})");
    return out;
  }

 private:
  std::string where(const Piece& pc) const {
    return label_ + ": in '" + quote_bounded(pc.text, 60) + "'";
  }

  std::unique_ptr<ChatTemplateNode> statement(const Piece& pc, const std::string& w) {
    auto n = std::make_unique<ChatTemplateNode>();
    const std::string rest = after_word(pc.text, w);
    std::string stop;
    if (w == "set") {
      const size_t eq = rest.find('=');
      n->kind = ChatTemplateNode::Kind::kSet;
      n->text = first_word(rest);
      if (eq == std::string::npos || n->text.empty())
        KIRI_RAISE(kData, where(pc), ": kiri's Jinja subset sets one name: {% set NAME = ... %}");
      n->expr = parse_expr(rest.substr(eq + 1), where(pc));
    } else if (w == "for") {
      n->kind = ChatTemplateNode::Kind::kFor;
      n->text = first_word(rest);
      const std::string tail = after_word(rest, n->text);
      if (first_word(tail) != "in")
        KIRI_RAISE(kData, where(pc), ": kiri's Jinja subset loops as {% for NAME in ... %}");
      n->expr = parse_expr(after_word(tail, "in"), where(pc));
      ++i_;
      n->body = parse({"endfor"}, &stop);
    } else if (w == "if") {
      n->kind = ChatTemplateNode::Kind::kIf;
      ExprPtr cond = parse_expr(rest, where(pc));
      for (;;) {
        ++i_;
        Nodes body = parse({"elif", "else", "endif"}, &stop);
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (stop == "endif") break;
        cond =
            stop == "elif" ? parse_expr(after_word(p_[i_].text, "elif"), where(p_[i_])) : nullptr;
      }
    } else {
      KIRI_RAISE(kData, where(pc), ": the statement '", w,
                 "' is not in kiri's Jinja subset (for, if/elif/else, set)");
    }
    return n;
  }

  std::vector<Piece> p_;
  std::string label_;
  size_t i_ = 0;
};

}  // namespace

ExprPtr parse_expr(std::string_view s, const std::string& where) {
  return ExprParser(lex(s, where), where).parse_all();
}

Nodes parse_template(const std::string& source, const std::string& label) {
  std::string stop;
  return TemplateParser(cut(source, label), label).parse({}, &stop);
}

}  // namespace kiri::data::jinja
