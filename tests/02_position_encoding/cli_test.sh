#!/usr/bin/env bash
# `tvlab rope` end to end: its own options, bad values of them, its figures and dumps.
#   tests/02_position_encoding/cli_test.sh path/to/tvlab
source "$(dirname "$0")/../common/cli_lib.sh"

check "rope --step" 0 "" -- "$tvlab" rope --step --backend opt
check "rope: sizes whose product overflows 64 bits are refused" 2 "--seq" -- "$tvlab" rope --heads 4194304 --seq 4194304 --head-dim 1048576
check "rope: a position that overflows is refused" 2 "--first-position" -- "$tvlab" rope --first-position 9223372036854775807
check "rope: the attention factor of --factor 1e300 does not make opt disagree" 0 "" -- "$tvlab" rope --factor 1e300
check "rope: an unknown --figure is refused without --svg too" 2 "--figure" -- "$tvlab" rope --figure bogus
check "rope: unknown rope type names the option" 2 "--rope-type" -- "$tvlab" rope --rope-type bogus
check "rope: unknown layout" 2 "--layout" -- "$tvlab" rope --layout diagonal
check "rope: odd head_dim" 2 "--head-dim" -- "$tvlab" rope --head-dim 7
check "rope: factor below 1" 2 "--factor" -- "$tvlab" rope --rope-type linear --factor 0.5
check "rope: unknown figure" 2 "--figure" -- "$tvlab" rope --figure nope --svg "$tmp/r.svg"
check "rope json" 0 "" -- "$tvlab" rope --json --rope-type dynamic --seq 40 --original-length 16
json_chapter_is 02_position_encoding
check "rope dump" 0 "" -- "$tvlab" rope --backend opt --dump "$tmp/rope"
is_npy "$tmp"/rope/{q,k,v,inv_freq,apply_rope_opt,attention_rope_opt,attention_alibi_opt}.npy
for figure in scaling decay; do
  check "rope --svg --figure $figure" 0 "" -- "$tvlab" rope --figure $figure --svg "$tmp/$figure.svg"
  is_svg "$tmp/$figure.svg"
done

# The Hugging Face rope types and fields, the config.json reader, and options overriding it.
json_param() {  # json_param KEY: the value of parameters.KEY in the last command's JSON
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameters"][sys.argv[2]])' "$tmp/out" "$1"
}
expect_param() {  # expect_param KEY VALUE WHAT
  if [ "$(json_param "$1")" = "$2" ]; then pass "$3"; else fail "$3: parameters.$1 is $(json_param "$1"), expected $2"; fi
}
check "rope llama3" 0 "" -- "$tvlab" rope --json --rope-type llama3 --factor 8 --low-freq-factor 1 --high-freq-factor 4 \
  --original-length 8192 --max-position-embeddings 131072 --theta 500000 --head-dim 128 --backend opt
expect_param rope_type llama3 "rope llama3: the type is reported"
expect_param max_position_embeddings 131072 "rope: --max-position-embeddings is reported"
check "rope longrope (long list beyond L)" 0 "" -- "$tvlab" rope --json --rope-type longrope --head-dim 8 \
  --short-factor 1,1,1,1 --long-factor "1, 2, 4, 8" --original-length 16 --max-position-embeddings 64 \
  --first-position 16 --seq 2 --factor 4
python3 -c 'import json,sys,math; p=json.load(open(sys.argv[1]))["parameters"]
want=[10000**(-i/4)/l for i,l in zip(range(4),[1,2,4,8])]
assert all(abs(a-b)<=1e-12*b for a,b in zip(p["inv_freq"],want)), p["inv_freq"]
assert abs(p["attention_factor"]-math.sqrt(1+math.log(4)/math.log(16)))<1e-12' "$tmp/out" \
  && pass "rope longrope: long factors and sqrt(1 + ln s / ln L) in the JSON" || fail "rope longrope: inv_freq or attention_factor"
check "rope yarn --no-truncate, DeepSeek mscale" 0 "" -- "$tvlab" rope --json --no-truncate --mscale 1 --mscale-all-dim 1 \
  --beta-fast 16 --beta-slow 2 --head-dim 64
expect_param attention_factor 1.0 "rope: mscale = mscale_all_dim gives attention factor 1"
check "rope --partial-rotary-factor" 0 "" -- "$tvlab" rope --json --partial-rotary-factor 0.5 --head-dim 16 --backend all
expect_param rotary_dim 8 "rope: rotary_dim = floor(d p)"
check "rope --attention-factor" 0 "" -- "$tvlab" rope --json --attention-factor 1.5
expect_param attention_factor 1.5 "rope: --attention-factor is used"
check "rope: --partial-rotary-factor above 1" 2 "--partial-rotary-factor" -- "$tvlab" rope --partial-rotary-factor 2
check "rope: odd rotary dimension" 2 "rotary_dim" -- "$tvlab" rope --partial-rotary-factor 0.375 --head-dim 8
check "rope: negative --beta-fast" 2 "--beta-fast" -- "$tvlab" rope --beta-fast -1
check "rope: beta_fast below beta_slow" 2 "beta_fast" -- "$tvlab" rope --beta-fast 1 --beta-slow 2
check "rope: negative --mscale" 2 "--mscale" -- "$tvlab" rope --mscale -1
check "rope: zero --attention-factor" 2 "--attention-factor" -- "$tvlab" rope --attention-factor 0
check "rope: zero --low-freq-factor" 2 "--low-freq-factor" -- "$tvlab" rope --rope-type llama3 --low-freq-factor 0
check "rope: high_freq_factor below low" 2 "high_freq_factor" -- "$tvlab" rope --rope-type llama3 --low-freq-factor 4 --high-freq-factor 2
check "rope: negative --max-position-embeddings" 2 "--max-position-embeddings" -- "$tvlab" rope --max-position-embeddings -5
check "rope: --truncate with --no-truncate" 2 "--no-truncate" -- "$tvlab" rope --truncate --no-truncate
check "rope: longrope without lists" 2 "--short-factor" -- "$tvlab" rope --rope-type longrope
check "rope: malformed --short-factor" 2 "--short-factor" -- "$tvlab" rope --rope-type longrope --short-factor 1,x --long-factor 1,1,1,1
check "rope: --long-factor of the wrong length" 2 "long_factor" -- "$tvlab" rope --rope-type longrope --short-factor 1,1,1,1 --long-factor 1,1
check "rope --help states the dynamic NTK rule" 0 "" -- "$tvlab" rope --help
grep -q "max_position_embeddings" "$tmp/out" && pass "rope --help: dynamic NTK measured in max_position_embeddings" || fail "rope --help lacks the dynamic rule"
cat > "$tmp/config.json" <<'JSON'
{"hidden_size": 1024, "num_attention_heads": 8, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
 "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}}
JSON
check "rope --hf-config" 0 "" -- "$tvlab" rope --json --hf-config "$tmp/config.json" --seq 3 --heads 1
expect_param head_dim 128 "rope --hf-config: head_dim = hidden_size / num_attention_heads"
expect_param rope_theta 1000000.0 "rope --hf-config: rope_theta from the file"
check "rope --hf-config with overrides" 0 "" -- "$tvlab" rope --json --hf-config "$tmp/config.json" --factor 2 --head-dim 64 --seq 3
expect_param factor 2.0 "rope --hf-config: --factor overrides the file"
expect_param head_dim 64 "rope --hf-config: --head-dim overrides the file"
check "rope: --hf-config of a missing file" 2 "absent.json" -- "$tvlab" rope --hf-config "$tmp/absent.json"
echo '{"max_position_embeddings": 64, "head_dim": 8, "rope_scaling": {"rope_type": "yarn", "factor": "x"}}' > "$tmp/bad.json"
check "rope: --hf-config with a bad field" 2 "rope_scaling.factor" -- "$tvlab" rope --hf-config "$tmp/bad.json"

check_load_round_trip rope --seq 5 --heads 2 --head-dim 8 --rope-type linear --factor 2 --step
is_npy "$tmp"/first/{apply_rope_k_ref,inv_freq,step_angles,step_scores}.npy
check_load_errors rope v --rope-type linear --factor 2
check "rope --load: a size option that disagrees" 2 "--head-dim: (16) disagrees with --load: q.npy's dimension 2 (head_dim) is 8" -- \
  "$tvlab" rope --load "$tmp/first" --head-dim 16
mkdir -p "$tmp/odd"
for name in q k v; do npy_tool write "$tmp/odd/$name.npy" "<f4" "2,5,7" 0.5; done
check "rope --load: an odd head_dim" 2 "--head-dim (7) must be positive and even" -- "$tvlab" rope --load "$tmp/odd"

[ "$failures" -eq 0 ]
