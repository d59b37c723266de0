#pragma once
// Import of llama2.c checkpoints (Karpathy's "legacy" version-0 format) and their tokenizer files.
#include <string>

namespace kvsieve {

/// Writes a GGUF (arch "llama", F32 tensors, SentencePiece-style vocabulary) from a llama2.c checkpoint
/// and tokenizer, laid out as llama.cpp's convert-llama2c-to-ggml does, with llama.context_length set to
/// the checkpoint's seq_len.
///
/// Checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; vocab_size < 0
/// means a separate classifier at the end), then float32 token_embedding [vocab][dim], rms_att [L][dim],
/// wq [L][dim][dim], wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim], rms_ffn [L][dim],
/// w1 [L][hidden][dim], w2 [L][dim][hidden], w3 [L][hidden][dim], rms_final [dim], freq_cis_real and
/// freq_cis_imag [seq_len][head_dim/2], (wcls [vocab][dim]).
/// Tokenizer: int32 max_token_length, then per token float32 score, int32 length, bytes.
/// Throws Error naming a file whose size does not match its header or a malformed tokenizer.
void convert_llama2c(const std::string& checkpoint, const std::string& tokenizer, const std::string& out_gguf);

}  // namespace kvsieve
