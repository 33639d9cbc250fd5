#!/usr/bin/env bash
# `tvlab moe` end to end: its own options and bad values of them.
#   tests/09_mixture_of_experts/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "moe --step" 0 "" -- "$tvlab" moe --step --backend ref
grep -q "Step 7" "$tmp/out" && pass "--step prints seven steps" || fail "--step does not print step 7"
check "moe --shared 1 --step, every backend" 0 "" -- "$tvlab" moe --shared 1 --step --backend all
check "moe: top-k above the experts names the option" 2 "--top-k (5)" -- "$tvlab" moe --experts 4 --top-k 5
check "moe: zero tokens names the option" 2 "--tokens" -- "$tvlab" moe --tokens 0
check "moe --dump" 0 "" -- "$tvlab" moe --backend ref --dump "$tmp/npy"
is_npy "$tmp"/npy/{x,moe_experts_ref}.npy

# The parameter calculator: --model / --config, --dtype, and its bad input.
check "moe --model deepseek-v3" 0 "" -- "$tvlab" moe --model deepseek-v3
grep -q "| total | 671.026 | 37.552 |" "$tmp/out" && pass "--model deepseek-v3: 671.026B total, 37.552B active" \
  || fail "--model deepseek-v3 does not print 671.026 / 37.552"
check "moe --model list" 0 "" -- "$tvlab" moe --model list
grep -q "qwen3-235b-a22b" "$tmp/out" && pass "--model list names the models" || fail "--model list misses qwen3-235b-a22b"
check "moe --model mixtral-8x7b --dtype Q4_K --json" 0 "" -- "$tvlab" moe --model mixtral-8x7b --dtype Q4_K --json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["total"] == 46702792704 and "Q4_K" in d["bytes"]' "$tmp/out" \
  && pass "--json: Mixtral's 46702792704 and its Q4_K bytes" || fail "--json output is not the expected object"
printf '{"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 50, "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2}' > "$tmp/tiny.json"
check "moe --config FILE" 0 "" -- "$tvlab" moe --config "$tmp/tiny.json"
check "moe: an unknown model lists the names" 2 "mixtral-8x7b" -- "$tvlab" moe --model mixtral
check "moe: --model and --config together" 2 "not both" -- "$tvlab" moe --model mixtral-8x7b --config "$tmp/tiny.json"
check "moe: a missing config key is named" 2 "num_experts_per_tok is missing" -- "$tvlab" moe --config <(printf '{"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 50, "intermediate_size": 24, "num_local_experts": 4}')
check "moe: an unknown --dtype lists the formats" 2 "Q4_K" -- "$tvlab" moe --model deepseek-v3 --dtype q3
check "moe: --dtype without a model" 2 "--dtype belongs to the calculator" -- "$tvlab" moe --dtype fp8
check "moe: a layer option with the calculator" 2 "--top-k belongs to the layer demo" -- "$tvlab" moe --model deepseek-v3 --top-k 3

# --ranks: expert parallelism step by step under mpirun (moe_mpi is built where MPI was found)
if [ -x "$(dirname "$tvlab")/moe_mpi" ]; then
  # under the sanitizers, LeakSanitizer would report Open MPI's own allocations, kept until exit
  check "moe --ranks 2: dispatch and combine under mpirun" 0 "" -- \
    env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$tvlab" moe --ranks 2
  grep -q "4. combine" "$tmp/out" && pass "--ranks prints the combine step" || fail "--ranks does not print the combine step"
  check "moe --ranks 1: one rank keeps every token" 0 "" -- \
    env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$tvlab" moe --ranks 1
else
  check "moe --ranks without MPI names what is missing" 2 "moe_mpi" -- "$tvlab" moe --ranks 2
fi
check "moe --max-ranks above --ranks names the option" 2 "--max-ranks (3)" -- "$tvlab" moe --ranks 2 --max-ranks 3
check "moe --ranks beyond this machine names the option" 2 "--ranks (17)" -- "$tvlab" moe --ranks 17

[ "$failures" -eq 0 ]
