// Hand-written equivalents of the split regexes. Each matcher tries the regex alternatives in
// order at a position and returns where the leftmost-first match ends, as a backtracking engine
// (Oniguruma in HF tokenizers) would; comments name the alternative each branch implements.
#include "tokenizer/pre_tokenizer.h"

namespace tandem {

namespace {

struct view {
  const char32_t* cp;
  const uint8_t* cls;
  size_t end;  // exclusive; the regex sees this as the end of the string
};

// ASCII letters that the contractions' case-insensitive match accepts. Oniguruma folds U+017F
// (long s) to 's' as well, which HF's output confirms.
bool ci_is(char32_t c, char lower) {
  if (c == static_cast<char32_t>(lower) || c == static_cast<char32_t>(lower - 32)) return true;
  return lower == 's' && c == 0x17F;
}

bool cs_is(char32_t c, char lower) { return c == static_cast<char32_t>(lower); }

// 's|'t|'re|'ve|'m|'ll|'d at i (text[i] is known to be '\''); 0 when none matches.
template <bool CaseInsensitive>
size_t match_contraction(const view& v, size_t i) {
  auto is = [](char32_t c, char l) { return CaseInsensitive ? ci_is(c, l) : cs_is(c, l); };
  if (i + 1 >= v.end) return 0;
  char32_t a = v.cp[i + 1];
  if (is(a, 's') || is(a, 't') || is(a, 'm') || is(a, 'd')) return i + 2;
  if (i + 2 >= v.end) return 0;
  char32_t b = v.cp[i + 2];
  if ((is(a, 'r') && is(b, 'e')) || (is(a, 'v') && is(b, 'e')) || (is(a, 'l') && is(b, 'l'))) {
    return i + 3;
  }
  return 0;
}

size_t run_of(const view& v, size_t i, uint8_t mask) {
  while (i < v.end && (v.cls[i] & mask)) ++i;
  return i;
}

// The Qwen/Llama 3 family. letter: the class of the letter run (L, or L|M for qwen35).
size_t match_tiktoken_style(const view& v, size_t i, uint8_t letter, size_t max_digits) {
  const uint8_t c = v.cls[i];
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (v.cp[i] == '\'') {
    if (size_t e = match_contraction<true>(v, i)) return e;
  }
  // [^\r\n\p{L}\p{N}]?<letter>+ : a letter run, optionally after one char that is not a
  // newline, letter or number.
  if (c & letter) return run_of(v, i, letter);
  if (!(c & (cc_newline | cc_letter | cc_number)) && i + 1 < v.end && (v.cls[i + 1] & letter)) {
    return run_of(v, i + 1, letter);
  }
  // \p{N}{1,max}
  if (c & cc_number) {
    size_t e = i + 1;
    while (e < v.end && e - i < max_digits && (v.cls[e] & cc_number)) ++e;
    return e;
  }
  // " ?[^\s<letter>\p{N}]+[\r\n]*"
  const uint8_t not_other = cc_space | letter | cc_number;
  size_t j = i;
  if (v.cp[j] == ' ' && j + 1 < v.end && !(v.cls[j + 1] & not_other)) ++j;
  if (!(v.cls[j] & not_other)) {
    while (j < v.end && !(v.cls[j] & not_other)) ++j;
    return run_of(v, j, cc_newline);
  }
  // From here text[i] is white space.
  const size_t ws_end = run_of(v, i, cc_space);
  // \s*[\r\n]+ : up to and including the last newline of the white-space run.
  for (size_t k = ws_end; k > i; --k) {
    if (v.cls[k - 1] & cc_newline) return k;
  }
  // \s+(?!\S) : the run, less its last char when a non-space follows; else \s+.
  if (ws_end == v.end || ws_end - i == 1) return ws_end;
  return ws_end - 1;
}

// GPT-2's regex, on a stretch that holds no numbers (SmolLM isolates each \p{N} beforehand).
size_t match_gpt2(const view& v, size_t i) {
  // 's|'t|'re|'ve|'m|'ll|'d
  if (v.cp[i] == '\'') {
    if (size_t e = match_contraction<false>(v, i)) return e;
  }
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
  size_t j = (v.cp[i] == ' ' && i + 1 < v.end && !(v.cls[i + 1] & cc_space)) ? i + 1 : i;
  const uint8_t c = v.cls[j];
  if (c & cc_letter) return run_of(v, j, cc_letter);
  if (c & cc_number) return run_of(v, j, cc_number);
  if (!(c & cc_space)) {
    while (j < v.end && !(v.cls[j] & (cc_space | cc_letter | cc_number))) ++j;
    return j;
  }
  // \s+(?!\S) | \s+
  const size_t ws_end = run_of(v, i, cc_space);
  if (ws_end == v.end || ws_end - i == 1) return ws_end;
  return ws_end - 1;
}

}  // namespace

result<pre_type> pre_type_from_name(std::string_view name) {
  if (name == "qwen2") return pre_type::qwen2;
  if (name == "qwen35") return pre_type::qwen35;
  if (name == "llama-bpe" || name == "llama3") return pre_type::llama3;
  if (name == "smollm") return pre_type::smollm;
  return make_error("unsupported tokenizer pre-tokenizer '", name,
                    "' (supported: qwen2, qwen35, llama-bpe, smollm)");
}

std::string_view pre_type_name(pre_type t) {
  switch (t) {
    case pre_type::qwen2: return "qwen2";
    case pre_type::qwen35: return "qwen35";
    case pre_type::llama3: return "llama-bpe";
    case pre_type::smollm: return "smollm";
  }
  return "?";
}

void pre_tokenize(pre_type type, const decoded_text& text, size_t begin, size_t end,
                  std::vector<size_t>& ends) {
  view v{text.cps.data(), text.classes.data(), end};
  if (type == pre_type::smollm) {
    // Digits(individual_digits) first: each number char is a piece and bounds the GPT-2 split.
    size_t i = begin;
    while (i < end) {
      if (text.classes[i] & cc_number) {
        ends.push_back(++i);
        continue;
      }
      size_t stop = i;
      while (stop < end && !(text.classes[stop] & cc_number)) ++stop;
      v.end = stop;
      while (i < stop) {
        i = match_gpt2(v, i);
        ends.push_back(i);
      }
    }
    return;
  }
  const uint8_t letter = type == pre_type::qwen35 ? (cc_letter | cc_mark) : cc_letter;
  const size_t max_digits = type == pre_type::llama3 ? 3 : 1;
  for (size_t i = begin; i < end;) {
    i = match_tiktoken_style(v, i, letter, max_digits);
    ends.push_back(i);
  }
}

}  // namespace tandem
