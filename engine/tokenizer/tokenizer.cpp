// Byte-level BPE: vocabulary indexing, added-token matching, and the merge loop (a heap of
// candidate pairs over a linked list of symbols, so long pieces cost O(n log n), not O(n^2)).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <mutex>
#include <queue>

#include "tokenizer/byte_unicode.h"

namespace tandem {

// Remembers the ids of recently seen pieces; prose repeats words constantly. Bounded by clearing
// when full, which is cheap and keeps memory flat under adversarial input.
struct tokenizer::bpe_cache {
  static constexpr size_t max_entries = 1 << 16;
  static constexpr size_t max_piece_bytes = 128;
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>> map;
};

tokenizer::tokenizer() : cache_(std::make_unique<bpe_cache>()) {}
tokenizer::tokenizer(tokenizer&&) noexcept = default;
tokenizer& tokenizer::operator=(tokenizer&&) noexcept = default;
tokenizer::~tokenizer() = default;

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

bool is_added(token_type t) { return t == token_type::control || t == token_type::user_defined; }

// Types whose text is byte-level encoded (everything the BPE model itself produces).
bool is_byte_level(token_type t) {
  return t == token_type::normal || t == token_type::byte || t == token_type::undefined ||
         t == token_type::unknown;
}

status check_special_id(const char* what, int32_t id, size_t n) {
  if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n)) {
    return make_error("tokenizer ", what, " id ", id, " is outside the vocabulary of ", n);
  }
  return {};
}

}  // namespace

result<tokenizer> tokenizer::from_vocab(tokenizer_vocab vocab) {
  tokenizer t;
  t.vocab_ = std::move(vocab);
  TANDEM_TRY(t.index());
  return t;
}

status tokenizer::index() {
  const tokenizer_vocab& v = vocab_;
  if (v.model != "gpt2") {
    return make_error("unsupported tokenizer model '", v.model, "' (only byte-level BPE 'gpt2')");
  }
  auto pre = pre_type_from_name(v.pre);
  if (!pre) return pre.err();
  pre_ = *pre;
  nfc_ = pre_ == pre_type::qwen2 || pre_ == pre_type::qwen35;
  ignore_merges_ = pre_ == pre_type::llama3;
  const size_t n = v.tokens.size();
  if (n == 0) return make_error("tokenizer vocabulary is empty");
  if (n > 0x7FFFFFFF) return make_error("tokenizer vocabulary is too large: ", n);
  if (v.types.size() != n) {
    return make_error("tokenizer has ", n, " tokens but ", v.types.size(), " token types");
  }
  TANDEM_TRY(check_special_id("bos", v.bos_id, n));
  TANDEM_TRY(check_special_id("eos", v.eos_id, n));
  TANDEM_TRY(check_special_id("eot", v.eot_id, n));
  TANDEM_TRY(check_special_id("padding", v.pad_id, n));

  bytes_.resize(n);
  by_bytes_.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const token_type type = v.types[id];
    if (static_cast<int32_t>(type) < 0 || static_cast<int32_t>(type) > 6) {
      return make_error("token ", id, " has unknown token type ", static_cast<int32_t>(type));
    }
    const std::string& text = v.tokens[id];
    if (is_byte_level(type)) {
      // As HF's ByteLevel decoder: a token with a code point outside the map stands for itself.
      auto raw = byte_level_to_bytes(text);
      bytes_[id] = raw ? std::move(*raw) : text;
      by_bytes_.emplace(bytes_[id], static_cast<int32_t>(id));
    } else {
      bytes_[id] = text;
    }
    if (is_added(type) && !text.empty()) {
      added_by_first_[static_cast<uint8_t>(text[0])].push_back(static_cast<int32_t>(id));
    }
  }
  for (auto& list : added_by_first_) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return v.tokens[a].size() > v.tokens[b].size();
    });
  }
  // Some vocabularies (SmolLM2) lack a few control bytes; like HF's BPE without an unk token,
  // such bytes are dropped from the input.
  for (unsigned b = 0; b < 256; ++b) {
    auto it = by_bytes_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = it == by_bytes_.end() ? -1 : it->second;
  }
  return index_merges();
}

status tokenizer::index_merges() {
  merges_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string& m = vocab_.merges[rank];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() ||
        m.find(' ', sp + 1) != std::string::npos) {
      return make_error("tokenizer merge ", rank, " is not two tokens: '", m, "'");
    }
    auto left = byte_level_to_bytes(std::string_view(m).substr(0, sp));
    auto right = byte_level_to_bytes(std::string_view(m).substr(sp + 1));
    if (!left || !right) {
      return make_error("tokenizer merge ", rank, " is not byte-level text: '", m, "'");
    }
    auto a = by_bytes_.find(*left);
    auto b = by_bytes_.find(*right);
    auto ab = by_bytes_.find(*left + *right);
    if (a == by_bytes_.end() || b == by_bytes_.end() || ab == by_bytes_.end()) {
      return make_error("tokenizer merge ", rank, " '", m, "' uses or makes a token missing from the vocabulary");
    }
    // A repeated pair keeps its first (highest-priority) rank.
    merges_.emplace(pair_key(a->second, b->second),
                    merge_entry{static_cast<int32_t>(rank), ab->second});
  }
  return {};
}

const tokenizer::merge_entry* tokenizer::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

token_type tokenizer::type_of(int32_t id) const {
  return is_valid_id(id) ? vocab_.types[id] : token_type::undefined;
}

std::string_view tokenizer::token_bytes(int32_t id) const {
  return is_valid_id(id) ? std::string_view(bytes_[id]) : std::string_view();
}

std::optional<int32_t> tokenizer::find_token(std::string_view text) const {
  if (!text.empty()) {
    for (int32_t id : added_by_first_[static_cast<uint8_t>(text[0])]) {
      if (vocab_.tokens[id] == text) return id;
    }
  }
  auto it = by_bytes_.find(std::string(text));
  if (it != by_bytes_.end()) return it->second;
  return std::nullopt;
}

result<std::vector<int32_t>> tokenizer::encode(std::string_view text,
                                               const encode_options& opt) const {
  // Validate once up front so segments never fail half-way through.
  TANDEM_TRY(validate_utf8(text));
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (opt.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  size_t seg_begin = 0;
  size_t i = 0;
  size_t next_plain = 0;  // the first plain range that does not end at or before i
  while (i < text.size()) {
    const auto& candidates = added_by_first_[static_cast<uint8_t>(text[i])];
    int32_t found = -1;
    while (next_plain < opt.plain.size() && opt.plain[next_plain].second <= i) ++next_plain;
    for (int32_t id : candidates) {
      const std::string& t = vocab_.tokens[id];
      if (vocab_.types[id] == token_type::control) {
        if (!opt.parse_special) continue;
        // A control token overlapping a plain range is user text spelling one, not the token.
        if (next_plain < opt.plain.size() && opt.plain[next_plain].first < i + t.size()) continue;
      }
      if (text.compare(i, t.size(), t) == 0) {
        found = id;
        break;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    encode_segment(text.substr(seg_begin, i - seg_begin), out);
    out.push_back(found);
    i += vocab_.tokens[found].size();
    seg_begin = i;
  }
  encode_segment(text.substr(seg_begin), out);
  return out;
}

void tokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc_) {
    // The text was validated as UTF-8, so utf8proc cannot fail on it; keep the input otherwise.
    auto r = nfc_normalize(text);
    if (r) {
      normalized = std::move(*r);
      text = normalized;
    }
  }
  decoded_text dec;
  if (!decode_utf8(text, dec).ok()) return;  // unreachable: input validated, NFC keeps it valid
  std::vector<size_t> ends;
  ends.reserve(dec.cps.size() / 3 + 1);
  pre_tokenize(pre_, dec, 0, dec.cps.size(), ends);
  size_t begin = 0;
  for (size_t end : ends) {
    const size_t b = dec.offsets[begin];
    encode_piece(text.substr(b, dec.offsets[end] - b), out);
    begin = end;
  }
}

void tokenizer::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.size() == 1) {
    if (int32_t id = byte_ids_[static_cast<uint8_t>(bytes[0])]; id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    auto it = by_bytes_.find(std::string(bytes));
    if (it != by_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (bytes.size() > bpe_cache::max_piece_bytes) {
    merge_piece(bytes, out);
    return;
  }
  std::string key(bytes);
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->map.find(key);
    if (it != cache_->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_piece(bytes, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->map.size() >= bpe_cache::max_entries) cache_->map.clear();
  cache_->map.emplace(std::move(key), std::move(ids));
}

void tokenizer::merge_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  struct symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct candidate {
    int32_t rank;
    int32_t pos;    // index of the left symbol
    int32_t left;   // ids when queued; stale entries no longer match and are skipped
    int32_t right;
    bool operator>(const candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<symbol> syms;
  syms.reserve(bytes.size());
  for (char c : bytes) {
    if (int32_t id = byte_ids_[static_cast<uint8_t>(c)]; id >= 0) syms.push_back({id, 0, 0});
  }
  const int32_t n = static_cast<int32_t>(syms.size());
  if (n == 0) return;
  for (int32_t i = 0; i < n; ++i) {
    syms[i].prev = i - 1;
    syms[i].next = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<candidate, std::vector<candidate>, std::greater<candidate>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t nx = syms[pos].next;
    if (nx < 0) return;
    if (const merge_entry* m = find_merge(syms[pos].id, syms[nx].id)) {
      heap.push({m->rank, pos, syms[pos].id, syms[nx].id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const candidate c = heap.top();
    heap.pop();
    symbol& s = syms[c.pos];
    if (s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;
    const int32_t gone = s.next;
    s.id = find_merge(c.left, c.right)->result;
    s.next = syms[gone].next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    syms[gone].id = -1;  // dead: never matches a queued id again
    push(s.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

result<std::string> tokenizer::decode(std::span<const int32_t> ids, bool skip_control) const {
  std::string out;
  for (int32_t id : ids) {
    if (!is_valid_id(id)) {
      return make_error("token id ", id, " is outside the vocabulary of ", bytes_.size());
    }
    if (skip_control && vocab_.types[id] == token_type::control) continue;
    out += bytes_[id];
  }
  return out;
}

}  // namespace tandem
