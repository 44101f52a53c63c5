"""Record tests/tiny/golden_greedy.json from the committed tiny target (rerun after `./reproduce.sh train-tiny`).

The outputs come from transformers' greedy `generate` (the independent reference); test_committed_models.py
then checks that transformers and our engine both reproduce them and that Standard SD is lossless on them.

    .venv/bin/python tests/tiny/record_golden.py
"""
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models" / "tiny"
OUT = Path(__file__).parent / "golden_greedy.json"
MAX_NEW_TOKENS = 48          # the tests decode exactly this many tokens (or up to EOS)
EXAMPLE = 2                  # the third test example of each family


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acceptmoe.evals.generators import FAMILIES, generate

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(MODELS / "target")
    model = AutoModelForCausalLM.from_pretrained(MODELS / "target", dtype=torch.float32).eval()
    cases = []
    for family in FAMILIES:
        ex = generate(family, "test", EXAMPLE + 1)[EXAMPLE]
        prompt = tok.apply_chat_template([{"role": "user", "content": ex["question"]}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)
        with torch.inference_mode():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        greedy = out[0, len(prompt):].tolist()
        cases.append({"family": family, "example_id": ex["id"], "prompt_ids": prompt, "greedy_ids": greedy,
                      "text": tok.decode(greedy)})
        print(f"{family}: {tok.decode(greedy)!r}")
    OUT.write_text(json.dumps(cases, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
