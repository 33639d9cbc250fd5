#!/usr/bin/env python3
"""Compares tvlab's RoPE frequencies with Hugging Face transformers'.

For each configuration below (every rope type, and real models' config.json RoPE fields) it
computes the inverse frequencies and the attention factor with transformers'
ROPE_INIT_FUNCTIONS and with `tvlab rope --json --hf-config FILE`, and prints the largest
relative difference of the frequencies and the difference of the attention factors as a
Markdown table. transformers computes in float32, tvlab in double: differences of a few 1e-8
are float32 rounding.

    bash scripts/hf_parity_env.sh     # once: build/hf_venv with transformers and torch (CPU)
    build/hf_venv/bin/python scripts/hf_rope_parity.py --tvlab build/default/chapters/tvlab
"""

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def base(**fields):
    config = {"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 4096, "rope_theta": 10000.0}
    config.update(fields)
    return config


# (name, config.json fields, seq_len passed to both sides or None). The models' RoPE fields are
# theirs (lengths, theta, factors, head sizes); Phi-3's 48-value short/long lists are made up here
# with the same shape and range (rising from about 1 to 3 and to 64), not copied.
PHI3_SHORT = [1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.25, 1.25, 1.4, 1.45, 1.55, 1.85, 1.9, 1.9, 1.95, 2.0, 2.05, 2.35, 2.4,
              2.45, 2.5, 2.6, 2.75, 2.8, 2.85, 2.9, 2.95, 3.0, 3.05, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1,
              3.1, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1, 3.1]
PHI3_LONG = [1.08, 1.11, 1.14, 1.34, 1.59, 1.6, 1.62, 2.62, 3.23, 3.4, 3.52, 3.6, 4.48, 5.57, 6.45, 9.43, 11.43, 13.3,
             17.65, 22.0, 27.9, 32.6, 41.3, 46.9, 48.3, 49.1, 50.7, 52.6, 55.2, 57.9, 58.1, 60.2, 60.8, 61.1, 61.9, 63.1,
             63.2, 63.8, 63.9, 64.0, 64.0, 64.0, 64.0, 64.0, 64.2, 64.2, 64.3, 64.5]
CONFIGS = [
    ("default, head_dim 128", base(), None),
    ("linear, factor 4", base(rope_scaling={"rope_type": "linear", "factor": 4.0}), None),
    ("dynamic, factor 4, seq_len 10000", base(rope_scaling={"rope_type": "dynamic", "factor": 4.0}), 10000),
    ("yarn, factor 4", base(max_position_embeddings=16384,
                           rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}),
     None),
    ("yarn, truncate false", base(max_position_embeddings=16384,
                                  rope_scaling={"rope_type": "yarn", "factor": 4.0, "truncate": False,
                                                "original_max_position_embeddings": 4096}), None),
    ("partial rotary 0.5, yarn", base(partial_rotary_factor=0.5, max_position_embeddings=16384,
                                      rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 4096}), None),
    ("Llama 3.1 8B (llama3)", base(max_position_embeddings=131072, rope_theta=500000.0,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192}), None),
    ("Phi-3 mini 128k fields (longrope), short", base(hidden_size=3072, max_position_embeddings=131072,
                                               original_max_position_embeddings=4096,
                                               rope_scaling={"type": "longrope", "short_factor": PHI3_SHORT,
                                                             "long_factor": PHI3_LONG}), None),
    ("Phi-3 mini 128k fields (longrope), seq_len 4097", base(hidden_size=3072, max_position_embeddings=131072,
                                                      original_max_position_embeddings=4096,
                                                      rope_scaling={"type": "longrope", "short_factor": PHI3_SHORT,
                                                                    "long_factor": PHI3_LONG}), 4097),
    ("Qwen2 7B + YaRN factor 4", base(hidden_size=3584, num_attention_heads=28, max_position_embeddings=32768,
                                      rope_theta=1000000.0,
                                      rope_scaling={"type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 32768}), None),
    ("DeepSeek-V3 (yarn, mscale)", {"hidden_size": 7168, "num_attention_heads": 128, "head_dim": 64,
                                    "max_position_embeddings": 163840, "rope_theta": 10000.0,
                                    "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                                                     "mscale": 1.0, "mscale_all_dim": 1.0,
                                                     "original_max_position_embeddings": 4096}}, None),
]


def hugging_face(fields, seq_len):
    import torch  # noqa: F401  (transformers' functions return torch tensors)
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(**fields)
    # Read back what transformers standardised (rope_parameters) to pick the function.
    rope_type = config.rope_parameters.get("rope_type", "default")
    if rope_type == "default":
        # Llama's own default ignores partial_rotary_factor; linear with factor 1 is the same formula
        # and honours it.
        config.rope_parameters["rope_type"] = "linear"
        config.rope_parameters["factor"] = 1.0
        rope_type = "linear"
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return [float(x) for x in inv_freq], float(attention_factor)


def tvlab(binary, fields, seq_len):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(fields, f)
        path = f.name
    try:
        # seq_len n: the last position is n - 1 (--first-position n - 1 --seq 1).
        position = ["--first-position", str(seq_len - 1)] if seq_len else []
        out = subprocess.run([binary, "rope", "--json", "--hf-config", path, "--seq", "1", "--heads", "1",
                              "--backend", "ref", *position], capture_output=True, text=True, check=True).stdout
    finally:
        Path(path).unlink()
    parameters = json.loads(out)["parameters"]
    return parameters["inv_freq"], parameters["attention_factor"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tvlab", default="build/default/chapters/tvlab", help="path of the tvlab command")
    args = parser.parse_args()
    import transformers
    import torch

    rows, worst = [], 0.0
    for name, fields, seq_len in CONFIGS:
        hf_freq, hf_factor = hugging_face(json.loads(json.dumps(fields)), seq_len)
        tv_freq, tv_factor = tvlab(args.tvlab, fields, seq_len)
        if len(hf_freq) != len(tv_freq):
            rows.append((name, len(hf_freq), f"length {len(tv_freq)} vs {len(hf_freq)}", "", ""))
            worst = float("inf")
            continue
        rel = max(abs(a - b) / abs(b) for a, b in zip(tv_freq, hf_freq))
        worst = max(worst, rel)
        rows.append((name, len(hf_freq), f"{rel:.1e}", f"{tv_factor:.7f}", f"{abs(tv_factor - hf_factor):.1e}"))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {datetime.date.today().isoformat()}\n")
    print("| configuration | pairs | max relative difference of inv_freq | attention factor | its difference |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    # float32 frequencies: a few units of 2^-24 = 6e-8 relative.
    return 0 if worst < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
