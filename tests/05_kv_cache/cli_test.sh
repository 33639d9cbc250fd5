#!/usr/bin/env bash
# `tvlab kv` end to end: the demonstration and its sizes, --step, the registry's versions, the
# KV-memory calculator with every dtype, built-in models and config files, the paged waste
# (--block-size), a quantized cache (--kv-quant), bad values of every option (one line naming the
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

# The registry: every version of the decode step is a backend; MLA's versions run no step of this command.
check "kv --backend list" 0 "" -- "$tvlab" kv --backend list
for name in ref opt opt_v1 opt_v2 opt_absorbed_v1 opt_absorbed_v2 cuda student; do
  grep -q "^  $name " "$tmp/out" && pass "--backend list names $name" || fail "--backend list does not name $name"
done
check "kv --backend opt_v1" 0 "" -- "$tvlab" kv --backend opt_v1
grep -q "opt_v1:  decode" "$tmp/out" && pass "--backend opt_v1 runs the decode step" || fail "--backend opt_v1 printed no decode error"
check "kv --backend opt_absorbed_v2" 2 "provides none of the functions" -- "$tvlab" kv --backend opt_absorbed_v2

# The paged waste over a seeded ShareGPT-like workload: preallocating 2048 tokens wastes about 76%,
# blocks of 16 about 1.5%; the unused slots of a last block average about (b - 1)/2.
check "kv --block-size 16" 0 "" -- "$tvlab" kv --block-size 16 --requests 2000 --seed 3
grep -qE "reserve L_max = 2048 +7[5-7]\.[0-9]%" "$tmp/out" && pass "--block-size: preallocation wastes about 76%" \
  || fail "--block-size: preallocation's waste is not about 76%"
grep -qE "paged, b = 16 +1\.[0-9]%" "$tmp/out" && pass "--block-size 16: paging wastes under 2%" || fail "--block-size 16: paged waste not 1.x%"
check "kv --block-size 256" 0 "" -- "$tvlab" kv --block-size 256 --requests 500 --max-len 4096 --prompt-max 100 --output-max 100
grep -qE "paged, b = 256 +[5-9][0-9]\.[0-9]%" "$tmp/out" && pass "--block-size 256 on ~100-token requests: most of a block unused" \
  || fail "--block-size 256: short requests should waste most of a block"
check "kv --block-size --json" 0 "" -- "$tvlab" kv --block-size 32 --json
json_chapter_is 05_kv_cache
check "kv: --block-size 0" 2 "--block-size" -- "$tvlab" kv --block-size 0
check "kv: --block-size over --max-len" 2 "--block-size" -- "$tvlab" kv --block-size 4096
check "kv: --requests 0" 2 "--requests" -- "$tvlab" kv --block-size 16 --requests 0
check "kv: --max-len shorter than a request" 2 "--max-len" -- "$tvlab" kv --block-size 16 --max-len 900
check "kv: --prompt-max -1" 2 "--prompt-max" -- "$tvlab" kv --block-size 16 --prompt-max -1
check "kv: --output-max 0" 2 "--output-max" -- "$tvlab" kv --block-size 16 --output-max 0
check "kv: --requests without --block-size" 2 "--requests" -- "$tvlab" kv --requests 10
check "kv: --block-size with the calculator" 2 "--block-size" -- "$tvlab" kv --model llama-3-8b --block-size 16
check "kv: --heads with --block-size" 2 "--heads" -- "$tvlab" kv --block-size 16 --heads 8
check "kv: too many requests for the memory" 2 "--requests" -- "$tvlab" kv --block-size 16 --requests 4000000000 --max-memory 1G

# A quantized cache on the demonstration layer: bytes per token against float32's 2 g d_k 4 = 64, and
# the attention error within the reference's bound.
check "kv --kv-quant all" 0 "" -- "$tvlab" kv --kv-quant all
grep -qE "^  int8 +32 +0\.500" "$tmp/out" && pass "--kv-quant int8: 16 codes + 4 scales x 4 B = 32 bytes, half of fp32" \
  || fail "--kv-quant int8: not 32 bytes"
for format in kivi int4 fp8; do
  grep -qE "^  $format " "$tmp/out" && pass "--kv-quant all shows $format" || fail "--kv-quant all does not show $format"
done
check "kv --kv-quant int4 at d_k 128" 0 "" -- "$tvlab" kv --kv-quant int4 --heads 8 --kv-heads 2 --head-dim 128
grep -qE "^  int4 +384 +0\.188" "$tmp/out" && pass "--kv-quant int4, d_k 128: 256 codes + 32 scales and minimums = 384 bytes" \
  || fail "--kv-quant int4 at d_k 128: not 384 bytes"
check "kv --kv-quant --json" 0 "" -- "$tvlab" kv --kv-quant fp8 --json
json_chapter_is 05_kv_cache
check "kv: an unknown --kv-quant" 2 "--kv-quant" -- "$tvlab" kv --kv-quant int3
check "kv: --kv-quant with --step" 2 "--step" -- "$tvlab" kv --kv-quant int8 --step
check "kv: --kv-quant with the calculator" 2 "--kv-quant" -- "$tvlab" kv --model llama-3-8b --kv-quant int8
check "kv: --kv-quant with --block-size" 2 "--kv-quant" -- "$tvlab" kv --block-size 16 --kv-quant int8

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
