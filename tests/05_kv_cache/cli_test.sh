#!/usr/bin/env bash
# `tvlab kv` end to end: the demonstration and its sizes, --step, the KV-memory calculator with
# every dtype, built-in models and config files, bad values of every option (one line naming the
# option, exit status 2), --dump and --load.
#   tests/05_kv_cache/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

# The demonstration: every variant decodes what one causal pass computes.
check "kv" 0 "" -- "$tvlab" kv
grep -q "Every variant decodes exactly what one causal pass computes" "$tmp/out" \
  && pass "kv: decoding with the cache equals the causal pass for every variant" || fail "kv: the identity does not hold"
for variant in "MHA (g = h = 4)" "GQA (g = 2)" "MQA (g = 1)" "MLA, naive" "MLA, absorbed" "TPA, R_K = R_V = 2"; do
  grep -qF "$variant" "$tmp/out" && pass "kv shows $variant" || fail "kv does not show $variant"
done
check "kv: other sizes" 0 "" -- "$tvlab" kv --d-model 24 --heads 6 --kv-heads 3 --head-dim 5 --prompt 7 --new-tokens 4 --backend all
grep -q "Every variant decodes exactly" "$tmp/out" && pass "kv: the identity holds at odd sizes" || fail "kv: the identity fails at odd sizes"
check "kv: no new token" 0 "" -- "$tvlab" kv --new-tokens 0
check "kv --json" 0 "" -- "$tvlab" kv --json
json_chapter_is 05_kv_cache

# --step: one decode step of one GQA group, seven steps.
check "kv --step" 0 "" -- "$tvlab" kv --step --backend ref
grep -q "Step 7" "$tmp/out" && pass "--step prints seven steps" || fail "--step does not print step 7"
grep -q "^S  \[2 x 6\]" "$tmp/out" && pass "--step: the group's 2 heads score 6 cached positions" \
  || fail "--step: the scores are not [2 x 6]"
check "kv --step with MQA" 0 "" -- "$tvlab" kv --step --kv-heads 1 --heads 3
grep -q "^S  \[3 x 6\]" "$tmp/out" && pass "--step with MQA: all 3 heads in one group" || fail "--step with MQA: not [3 x 6]"

# The calculator: each dtype halves (or doubles) the bytes; the published Llama 2 70B at 4K is 1.25 GiB in 16 bits.
check "kv --model llama-2-70b" 0 "" -- "$tvlab" kv --model llama-2-70b
grep -q "one sequence *1.34 GB (1.25 GiB)" "$tmp/out" && pass "llama-2-70b, 4K tokens, bf16: 1.25 GiB" || fail "llama-2-70b: not 1.25 GiB"
for pair in fp32:"2.68 GB" fp16:"1.34 GB" bf16:"1.34 GB" fp8:"671 MB" int8:"671 MB" int4:"336 MB"; do
  dtype=${pair%%:*} size=${pair#*:}
  check "kv --model llama-2-70b --dtype $dtype" 0 "" -- "$tvlab" kv --model llama-2-70b --dtype "$dtype"
  grep -q "one sequence *$size" "$tmp/out" && pass "--dtype $dtype: $size a sequence" || fail "--dtype $dtype: not $size"
done
check "kv: MLA with GPUs" 0 "" -- "$tvlab" kv --model deepseek-v2 --seq 131072 --batch 4 --gpus 2 --gpu-memory 80
grep -q "MLA (d_c + d_h^R)" "$tmp/out" && grep -q "fit on 2 GPU" "$tmp/out" \
  && pass "deepseek-v2: the MLA row and the sequences that fit" || fail "deepseek-v2: MLA row or GPU line missing"
# Absurd sizes: counts beyond long long's range are printed in scientific notation, never converted.
check "kv: an absurd --seq" 0 "" -- "$tvlab" kv --model llama-3-8b --seq 9000000000000000000 --batch 1000000000 --gpus 3
grep -q "cache alone needs: 1.47e+22" "$tmp/out" && grep -q "fit on 3 GPU(s): 0 " "$tmp/out" \
  && pass "an absurd --seq: 1.47e+22 GPUs, no sequence fits" || fail "an absurd --seq: wrong GPU counts"
check "kv: an absurd --gpus" 0 "" -- "$tvlab" kv --model llama-3-8b --seq 1 --gpus 9000000000000000000
grep -q "fit on 9000000000000000000 GPU(s): 5.49e+24 " "$tmp/out" \
  && pass "an absurd --gpus: 5.49e+24 sequences" || fail "an absurd --gpus: wrong sequence count"
check "kv --model list" 0 "" -- "$tvlab" kv --model list
[ "$(grep -c "config.json" "$tmp/out")" -ge 9 ] && pass "--model list names 9 models with their sources" || fail "--model list is short"
check "kv --model --json" 0 "" -- "$tvlab" kv --model mistral-7b --json
json_chapter_is 05_kv_cache

# --config: a Hugging Face config.json (GQA, no head_dim: hidden_size / heads).
cat > "$tmp/config.json" <<'JSON'
{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
 "torch_dtype": "bfloat16"}
JSON
check "kv --config" 0 "" -- "$tvlab" kv --config "$tmp/config.json" --seq 8192
grep -q "one sequence *1.07 GB (1.00 GiB)" "$tmp/out" && pass "--config: 32 layers x 2 x 8 x 128 x 8192 x 2 B = 1 GiB" \
  || fail "--config: not 1 GiB"
echo '{"num_hidden_layers": 32, "hidden_size": 4096}' > "$tmp/bad.json"
check "kv --config without heads" 2 "--config" -- "$tvlab" kv --config "$tmp/bad.json"
echo '{"num_hidden_layers": 32,' > "$tmp/broken.json"
check "kv --config of malformed JSON" 2 "--config" -- "$tvlab" kv --config "$tmp/broken.json"
echo '{"num_hidden_layers": 1e300, "hidden_size": 4096, "num_attention_heads": 32}' > "$tmp/huge.json"
check "kv --config with a size beyond 64 bits" 2 "num_hidden_layers" -- "$tvlab" kv --config "$tmp/huge.json"
check "kv --config that does not exist" 2 "--config" -- "$tvlab" kv --config "$tmp/none.json"
check "kv --model and --config" 2 "--config" -- "$tvlab" kv --model llama-3-8b --config "$tmp/config.json"

# Bad values: one line naming the option, exit status 2.
check "kv: an unknown --model" 2 "--model" -- "$tvlab" kv --model gpt-5
check "kv: an unknown --dtype" 2 "--dtype" -- "$tvlab" kv --model llama-3-8b --dtype fp12
check "kv: --seq 0" 2 "--seq" -- "$tvlab" kv --model llama-3-8b --seq 0
check "kv: --batch 0" 2 "--batch" -- "$tvlab" kv --model llama-3-8b --batch 0
check "kv: --gpus -1" 2 "--gpus" -- "$tvlab" kv --model llama-3-8b --gpus -1
check "kv: --gpu-memory 0" 2 "--gpu-memory" -- "$tvlab" kv --model llama-3-8b --gpu-memory 0
check "kv: --gpu-memory nan" 2 "--gpu-memory" -- "$tvlab" kv --model llama-3-8b --gpu-memory nan
check "kv: --gpu-memory beyond a double in bytes" 2 "--gpu-memory" -- "$tvlab" kv --model llama-3-8b --gpu-memory 1e300
check "kv: --seq without a model" 2 "--seq" -- "$tvlab" kv --seq 100
check "kv: --dtype without a model" 2 "--dtype" -- "$tvlab" kv --dtype fp16
check "kv: --step with the calculator" 2 "--step" -- "$tvlab" kv --model llama-3-8b --step
check "kv: --heads with the calculator" 2 "--heads" -- "$tvlab" kv --model llama-3-8b --heads 8
check "kv: --load with the calculator" 2 "--load" -- "$tvlab" kv --config "$tmp/config.json" --load "$tmp"
check "kv: --d-model 0" 2 "--d-model" -- "$tvlab" kv --d-model 0
check "kv: --heads 0" 2 "--heads" -- "$tvlab" kv --heads 0
check "kv: --kv-heads 0" 2 "--kv-heads" -- "$tvlab" kv --kv-heads 0
check "kv: --kv-heads not dividing --heads" 2 "--kv-heads" -- "$tvlab" kv --heads 6 --kv-heads 4
check "kv: --head-dim 0" 2 "--head-dim" -- "$tvlab" kv --head-dim 0
check "kv: --prompt 0" 2 "--prompt" -- "$tvlab" kv --prompt 0
check "kv: --new-tokens -1" 2 "--new-tokens" -- "$tvlab" kv --new-tokens -1
check "kv: --step without a new token" 2 "--new-tokens" -- "$tvlab" kv --step --new-tokens 0
check "kv: a run too large for the memory" 2 "--" -- "$tvlab" kv --prompt 2000000000 --max-memory 1G
check "kv: an unknown --backend" 2 "--backend" -- "$tvlab" kv --backend fastest

# --dump, then --load of the dump: the same outputs; broken files named.
check "kv --dump" 0 "" -- "$tvlab" kv --backend ref --dump "$tmp/npy"
is_npy "$tmp"/npy/{q,k_cache,v_cache,decode_ref,lse_ref}.npy
check_load_round_trip kv --backend all
# k_cache.npy broken in every way (q.npy of another head_dim is reported on k_cache.npy, which must agree).
check_load_errors kv k_cache --backend all
rm -rf "$tmp/no_q" && cp -r "$tmp/first" "$tmp/no_q" && rm "$tmp/no_q/q.npy"
check "kv --load: q.npy missing" 2 "q.npy does not exist" -- "$tvlab" kv --load "$tmp/no_q"
npy_tool write "$tmp/no_q/q.npy" "<f4" "4,4,1" 1
check "kv --load: q.npy of rank 3" 2 "q.npy has shape" -- "$tvlab" kv --load "$tmp/no_q"
check "kv --load: --heads other than q.npy's" 2 "--heads" -- "$tvlab" kv --load "$tmp/first" --heads 8

[ "$failures" -eq 0 ]
