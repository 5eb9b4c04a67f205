#include "kiri/data/documents.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/shard.h"
#include "kiri/data/token_source.h"

namespace kiri::data {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxJsonDepth = 64;

bool is_pattern(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// An input whose type cannot be read (a loop of symbolic links, no permission): kData
// naming it, where the filesystem's own exception would say only "filesystem error".
[[noreturn]] void unreadable_input(const fs::path& p, const std::error_code& ec) {
  if (ec == std::errc::too_many_symbolic_link_levels)
    KIRI_RAISE(kData, "input ", p.string(),
               " is a loop of symbolic links (following it leads back to itself: ", ec.message(),
               "); remove the link or point it at a file or folder");
  KIRI_RAISE(kData, "cannot read input ", p.string(), ": ", ec.message());
}

void add_folder(const fs::path& dir, std::vector<std::string>& out) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) KIRI_RAISE(kData, "cannot list input folder ", dir.string(), ": ", ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) KIRI_RAISE(kData, "cannot list input folder ", dir.string(), ": ", ec.message());
    if (hidden(it->path())) {  // .git, editor backups: not documents
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    // A link to nothing is no document (skipped, as before); any other failure is named.
    const bool regular = it->is_regular_file(ec);
    if (ec && ec != std::errc::no_such_file_or_directory) unreadable_input(it->path(), ec);
    if (regular) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) KIRI_RAISE(kData, "input folder ", dir.string(), " holds no files");
  out.insert(out.end(), files.begin(), files.end());
}

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return 0;
  return n;
}

void append_text(std::string_view text, const Tokenizer& tok, std::vector<int32_t>& tokens,
                 uint64_t& documents, const std::string& path) {
  if (documents > 0) {
    KIRI_CHECK_KIND(kConfig, tok.eot_token() >= 0, "tokenizer ", tok.name(),
                    " has no end-of-text token to put between the documents (at ", path, ")");
    tokens.push_back(tok.eot_token());
  }
  const std::vector<int32_t> ids = tok.encode(text);
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  ++documents;
}

}  // namespace

void for_each_jsonl_line(std::string_view bytes, const std::string& label,
                         const std::function<void(const std::string& where, std::string_view line,
                                                  const nlohmann::json& j)>& each) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < bytes.size();) {
    size_t end = bytes.find('\n', pos);
    if (end == std::string_view::npos) end = bytes.size();
    const std::string_view line = bytes.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
    const std::string where = label + ":" + std::to_string(line_no);
    if (json_nesting_depth(line, kMaxJsonDepth + 1) > kMaxJsonDepth)
      KIRI_RAISE(kData, where, ": JSON nests deeper than ", kMaxJsonDepth, " levels");
    each(where, line, nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false));
  }
}

namespace {

void append_jsonl(std::string_view bytes, const std::string& path, const Tokenizer& tok,
                  const DocumentOptions& opts, std::vector<int32_t>& tokens, uint64_t& documents,
                  SourceInfo& info) {
  for_each_jsonl_line(
      bytes, path, [&](const std::string& where, std::string_view line, const nlohmann::json& j) {
        if (j.is_discarded())
          KIRI_RAISE(kData, where, ": not a JSON value: ", quote_bounded(line, 80));
        if (!j.is_object() || !j.contains(opts.text_key) || !j[opts.text_key].is_string())
          KIRI_RAISE(kData, where, ": want an object with a string \"", opts.text_key,
                     "\" (--text-key), got ", quote_bounded(line, 80));
        append_text(j[opts.text_key].get_ref<const std::string&>(), tok, tokens, documents, path);
        ++info.documents;
      });
}

void append_tokens(const std::string& path, const Tokenizer& tok, std::vector<int32_t>& tokens,
                   uint64_t& documents, SourceInfo& info) {
  const TokenSource src = TokenSource::open_file(path);
  const TokenSegment& seg = src.segments().front();
  info.format = token_format_name(seg.format);
  if (seg.format == TokenFormat::kKiri && seg.tokenizer != tok.name())
    KIRI_RAISE(kData, "token shard ", path, " was made with tokenizer ", seg.tokenizer, ", not ",
               tok.name(), " (--tokenizer ", seg.tokenizer, ")");
  src.verify(static_cast<uint32_t>(tok.vocab_size()));
  if (src.size() == 0) return;
  if (documents > 0) {
    KIRI_CHECK_KIND(kConfig, tok.eot_token() >= 0, "tokenizer ", tok.name(),
                    " has no end-of-text token to put between the documents (at ", path, ")");
    tokens.push_back(tok.eot_token());
  }
  const size_t at = tokens.size();
  tokens.resize(at + src.size());
  src.read(0, src.size(), tokens.data() + at);
  ++documents;
  info.documents = 1;
}

bool has_token_magic(const MappedFile& f) {
  const unsigned char* d = f.data();
  if (has_shard_magic(d, f.size())) return true;
  return f.size() >= kLlmcHeaderBytes &&
         (static_cast<uint32_t>(d[0]) | static_cast<uint32_t>(d[1]) << 8 |
          static_cast<uint32_t>(d[2]) << 16 | static_cast<uint32_t>(d[3]) << 24) ==
             static_cast<uint32_t>(kLlmcMagic);
}

}  // namespace

InputFormat parse_input_format(const std::string& name) {
  if (name == "auto") return InputFormat::kAuto;
  if (name == "text") return InputFormat::kText;
  if (name == "jsonl") return InputFormat::kJsonl;
  if (name == "tokens") return InputFormat::kTokens;
  if (name == "chat") return InputFormat::kChat;
  if (name == "prompt-completion") return InputFormat::kPromptCompletion;
  KIRI_RAISE(kConfig, "unknown input format '", name,
             "' (known: auto, text, jsonl, tokens, chat, prompt-completion)");
}

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kAuto:
      return "auto";
    case InputFormat::kText:
      return "text";
    case InputFormat::kJsonl:
      return "jsonl";
    case InputFormat::kTokens:
      return "tokens";
    case InputFormat::kChat:
      return "chat";
    case InputFormat::kPromptCompletion:
      return "prompt-completion";
  }
  return "?";
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      add_folder(in, out);
    } else if (fs::exists(in, ec)) {
      out.push_back(in);
    } else if (ec && ec != std::errc::no_such_file_or_directory) {
      unreadable_input(in, ec);
    } else if (is_pattern(in)) {
      glob_t g{};
      const int rc = ::glob(in.c_str(), 0, nullptr, &g);
      std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
      ::globfree(&g);
      if (matches.empty()) KIRI_RAISE(kData, "input pattern ", in, " matches no file");
      std::sort(matches.begin(), matches.end());
      for (const std::string& m : matches)
        if (fs::is_directory(m, ec))
          add_folder(m, out);
        else if (ec && ec != std::errc::no_such_file_or_directory)
          unreadable_input(m, ec);
        else
          out.push_back(m);
    } else if (fs::symlink_status(in, ec).type() == fs::file_type::symlink) {
      std::error_code why;
      (void)fs::status(in, why);
      KIRI_RAISE(kData, "input ", in, " is a symlink that leads nowhere: ",
                 why ? why.message() : "its target does not exist");
    } else {
      KIRI_RAISE(kData, "input ", in, " does not exist");
    }
  }
  return out;
}

void check_text(std::string_view bytes, const std::string& path) {
  if (const size_t nul = bytes.find('\0'); nul != std::string_view::npos)
    KIRI_RAISE(kData, path, " is not text: a NUL byte at offset ", nul,
               " (token files need a kiri or llm.c header, or --format tokens for nanoGPT's raw "
               "uint16)");
  uint64_t invalid = 0;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = utf8_length(bytes, i);
    invalid += n == 0;
    i += n == 0 ? 1 : n;
  }
  if (bytes.size() >= 8 && invalid * 100 > bytes.size())
    KIRI_RAISE(kData, path, " is not text: ", invalid, " of its ", bytes.size(),
               " bytes are not valid UTF-8 (the limit is 1%)");
}

void append_text_documents(std::string_view bytes, const std::string& label, bool jsonl,
                           const Tokenizer& tokenizer, const DocumentOptions& opts,
                           std::vector<int32_t>& tokens, uint64_t& documents, SourceInfo& info) {
  check_text(bytes, label);
  if (jsonl) {
    append_jsonl(bytes, label, tokenizer, opts, tokens, documents, info);
  } else if (opts.separator.empty()) {
    if (bytes.empty()) return;
    append_text(bytes, tokenizer, tokens, documents, label);
    info.documents = 1;
  } else {
    for (size_t pos = 0; pos <= bytes.size();) {
      size_t end = bytes.find(opts.separator, pos);
      if (end == std::string_view::npos) end = bytes.size();
      const std::string_view doc = bytes.substr(pos, end - pos);
      pos = end + opts.separator.size();
      if (doc.find_first_not_of(" \t\r\n") == std::string_view::npos) continue;
      append_text(doc, tokenizer, tokens, documents, label);
      ++info.documents;
    }
  }
}

SourceInfo append_documents(const std::string& path, const Tokenizer& tokenizer,
                            const DocumentOptions& opts, std::vector<int32_t>& tokens,
                            uint64_t& documents) {
  SourceInfo info;
  info.path = fs::absolute(path).lexically_normal().string();
  const uint64_t before = tokens.size();
  InputFormat format = opts.format;
  {
    const MappedFile file(path, "corpus text");
    info.bytes = file.size();
    if (format == InputFormat::kAuto) {
      const std::string ext = fs::path(path).extension().string();
      format = has_token_magic(file)                 ? InputFormat::kTokens
               : ext == ".jsonl" || ext == ".ndjson" ? InputFormat::kJsonl
                                                     : InputFormat::kText;
    }
    if (format != InputFormat::kTokens) {
      info.format = input_format_name(format);
      append_text_documents({reinterpret_cast<const char*>(file.data()), file.size()}, path,
                            format == InputFormat::kJsonl, tokenizer, opts, tokens, documents,
                            info);
    }
  }
  if (format == InputFormat::kTokens) append_tokens(path, tokenizer, tokens, documents, info);
  info.tokens = tokens.size() - before;
  return info;
}

}  // namespace kiri::data
