#!/usr/bin/env bash
# Writes the hand-made seed inputs of each fuzz target into fuzz/corpus/<target>/seed-* (scripts/fuzz.sh adds the
# inputs the fuzzer finds that reach new code; `bash scripts/fuzz-corpus.sh pack` writes the committed archive). Needs build/bin/kvsieve for the saved-sequence seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
C=fuzz/corpus
mkdir -p $C/{gguf,safetensors,tokenizer,policy_spec,chat_template,api_request,cache_file,request_path}
# GGUF: the first 64 KiB of two bundled models (header, metadata with the vocabulary, tensor infos).
head -c 65536 tests/data/models/stories260K.gguf > $C/gguf/seed-stories260K-head.gguf
head -c 65536 tests/data/models/tiny-qwen3-q4_k_m.gguf > $C/gguf/seed-tiny-qwen3-head.gguf
# safetensors: two small KVzap checkpoints.
cp tests/data/models/kvzap/stories260K-linear/model.safetensors $C/safetensors/seed-kvzap-stories260K.safetensors
cp tests/data/kvzap/tiny-qwen3-linear/model.safetensors $C/safetensors/seed-kvzap-tiny-qwen3.safetensors
printf 'Once upon a time, there was a little girl named Lily.' > $C/tokenizer/seed-story.txt
printf '<|im_start|>user\nHéllo wörld! 12345 日本語 \xf0\x9f\x98\x80<|im_end|>\n' > $C/tokenizer/seed-chatml.txt
printf '  tabs\tand\n\nnewlines   and  spaces  ' > $C/tokenizer/seed-spaces.txt
i=0
for s in "full" "snapkv:ratio=0.5" "streaming_llm:window=256,sinks=4" "h2o:budget=512" "tova:budget=64,rule=layer" \
         "pyramidkv:ratio=0.7" "knorm:ratio=0.3+quest:budget=512" "quest:budget=256" "expected_attention:ratio=0.5" \
         "random:ratio=0.25" "snapkv:budget=100,sinks=4,window=32"; do
  printf '%s' "$s" > $C/policy_spec/seed-$i.txt
  i=$((i + 1))
done
printf '%s' "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if not messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM<|im_end|>\\n' }}{% endif %}" > $C/chat_template/seed-chatml.jinja
printf '%s' "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{{ m['content'] | trim }}<|eot_id|>{% endfor %}" > $C/chat_template/seed-llama3.jinja
printf '%s' "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}{{ m['content'] }}<end_of_turn>{% endfor %}" > $C/chat_template/seed-gemma.jinja
printf '%s' "{% if messages[0]['role'] == 'system' %}<<SYS>>{{ system }}<</SYS>>{% endif %}[INST] {{ content }} [/INST]" > $C/chat_template/seed-llama2.jinja
printf '%s' "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}" > $C/chat_template/seed-mistral.jinja
printf 'sys\x01user says hi\x01assistant answers\x01user again' > $C/chat_template/seed-conversation.txt
printf '%s' '{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"stop":["."],"stream":true,"stream_options":{"include_usage":true},"kv_policy":"snapkv:ratio=0.5"}' > $C/api_request/seed-completion.json
printf '%s' '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_completion_tokens":5,"seed":3,"top_p":0.9,"n":1,"logprobs":false}' > $C/api_request/seed-chat.json
printf '%s' '{"prompt":[1,2,3],"echo":false,"best_of":1,"presence_penalty":0,"logit_bias":{},"user":"u","top_k":40,"min_p":0.05}' > $C/api_request/seed-ids.json
# Whole request path: valid requests and hostile ones (deep nesting, huge windows, NaN, unknown presets, paths in model=).
R=$C/request_path
cp $C/api_request/seed-completion.json $C/api_request/seed-chat.json $C/api_request/seed-ids.json $R/
printf '%s' '{"prompt":"Once upon a time","max_tokens":1,"temperature":0.7,"top_k":5,"top_p":0.9,"min_p":0.1,"seed":7,"logit_bias":{"3":100},"kv_policy":"streaming_llm:window=4,sinks=1"}' > $R/seed-sampled.json
printf '%s' '{"prompt":"Hi","kv_policy":"h2o:budget=8"}' > $R/seed-h2o.json
printf '%s' '{"prompt":"Hi","kv_policy":"knorm:ratio=0.3+quest:budget=16"}' > $R/seed-stacked.json
printf '%s' '{"prompt":"Hi","kv_policy":"snapkv:window=1000000000,budget=99999999999"}' > $R/seed-huge-window.json
printf '%s' '{"prompt":"Hi","kv_policy":"snapkv:ratio=NaN"}' > $R/seed-nan-spec.json
printf '%s' '{"prompt":"Hi","temperature":NaN,"top_p":1e999}' > $R/seed-nan-number.json
printf '%s' '{"prompt":"Hi","kv_policy":"no_such_preset:ratio=0.5"}' > $R/seed-unknown-preset.json
printf '%s' '{"prompt":"Hi","kv_policy":"kvzap:model=../../etc/passwd"}' > $R/seed-path-in-model.json
printf '%s' '{"prompt":"Hi","kv_policy":"wgkv:model=/tmp/x.safetensors"}' > $R/seed-absolute-model.json
printf '{"prompt":"Hi","temperature":%s1%s}' "$(printf '[%.0s' $(seq 1 70))" "$(printf ']%.0s' $(seq 1 70))" > $R/seed-deep.json
printf '%s' '{"messages":[{"role":"user","content":[{"type":{},"text":""}]}]}' > $R/seed-part-type-object.json
printf '%s' '{"prompt":[0,1,2,99999999],"cache_restore":"../x"}' > $R/seed-bad-ids.json
printf '%s' '{"model":"m","prompt":[[1,2,3,4]],"echo":true,"logprobs":5,"max_tokens":0,"n":3,"best_of":3}' > $R/seed-echo-logprobs.json
printf '%s' '{"model":"m","messages":[{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":20,"n":2,"presence_penalty":-2,"frequency_penalty":2}' > $R/seed-chat-logprobs.json
printf '%s' '{"model":"gpt-4o","prompt":"Hi","logprobs":6,"top_logprobs":21,"n":9}' > $R/seed-unknown-model.json
printf '%s' '{"prompt":"Hi <|im_end|>","add_special_tokens":false}' > $R/seed-tokenize.json
printf '%s' '{"tokens":[1,2,3,-1,999999]}' > $R/seed-detokenize.json
# The same path from the bytes on the wire: requests as a client sends them (the body of the first one read goes on),
# pipelined ones, and heads the front refuses (chunked, compressed, folded with a Content-Length list, HTTP/2.0, a
# body over the limit).
B='{"prompt":"Once upon a time","max_tokens":1,"kv_policy":"h2o:budget=8"}'
printf 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
  ${#B} "$B" > $R/seed-http-post.txt
printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nPOST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n' > $R/seed-http-pipelined.txt
printf 'POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n' > $R/seed-http-chunked.txt
printf 'POST /v1/completions HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc' > $R/seed-http-gzip.txt
printf 'GET /v1/models HTTP/1.1\r\nX-A: one\r\n  two\r\nContent-Length: 1, 1\r\n\r\nx' > $R/seed-http-folded.txt
printf 'GET /a HTTP/2.0\r\n\r\n' > $R/seed-http-version.txt
printf '\r\n\r\nGET /%%zz?q=1 HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 99999\r\n\r\n' > $R/seed-http-too-large.txt
# Saved sequences of stories260K under three policies, without their 8-byte checksum (the target appends it).
tmp=$(mktemp)
for p in full "h2o:budget=24" "streaming_llm:window=8,sinks=2"; do
  build/bin/kvsieve generate -m tests/data/models/stories260K.gguf -p "Once upon a time" -n 12 --temp 0 -q --ids --policy "$p" \
    --save-cache "$tmp" >/dev/null
  head -c -8 "$tmp" > "$C/cache_file/seed-$(printf '%s' "$p" | tr -c 'a-z0-9' '_').kvseq"
done
rm -f "$tmp"
