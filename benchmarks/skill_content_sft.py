"""Whether the embedded default's Scientist seat can learn to write its skills' content: fine-tune a copy of a
model on the Scientist's turns at the skills' chances, then measure it with ``replicalab bench policy``.

    python benchmarks/skill_content_sft.py --out DIR [--model DIR] [--steps 600] [--seeds 300] [--skills defend]
                                          [--counters]

The rows are the turns at a skill's chance (of every skill, or of ``--skills`` alone) of freshly recorded
transcripts (the recipe's per-chance Scientist: each skill used at each chance with probability 0.5, so the
decision stays open both ways), each a
prompt/completion example (with ``--counters``, only the defend skill's counters whose sample size or days differ
from the Scientist's plan on the table: the numbers a seat that copies its own plan gets wrong) with its loss on
that reply, and as many whole chats of both seats (the recipe's examples, so the seats keep the rest of their
play).  The copy is written to ``--out`` with a record of its source
and these options (``skill_content_sft.json``; it is no recipe build, so it has no ``build_info.json``);
``replicalab bench policy --model DIR`` then gives each field's probability at the chances next to the source's.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

#: The recipe's transcripts are shuffled with seed 0; these use other coins on the same training seeds.
DECISION_SEED, REPLAY_SEED = 1, 2
FINE_TUNE_FILE = "skill_content_sft.json"


def _counter_off_plan(transcript: list, k: int) -> bool:
    """Whether turn ``k`` is a defend counter whose sample size or days differ from the plan on the table."""
    from replicalab.agents.skilled import COUNTER_RATIONALE
    from training.model.sft_data import plan_before

    reply = json.loads(transcript[k]["completion"][0]["content"])
    if reply.get("rationale") != COUNTER_RATIONALE:
        return False
    plan = plan_before(transcript, k)
    return any(reply[name] != plan[name] for name in ("sample_size", "duration_days"))


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from replicalab.agents import SKILLS
    from training.argtypes import positive_float, positive_int
    from training.config.model import DefaultModelConfig
    from training.model.card import BUILD_INFO_FILE
    from training.model.default import resolve_default_model, training_examples
    from training.model.sft import run_sft, tokenize_example
    from training.model.sft_data import collect_transcripts, is_skill_chance

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="new directory for the fine-tuned copy")
    parser.add_argument("--model", default=None, help="source model (default: the embedded default model)")
    parser.add_argument("--steps", type=positive_int, default=600)
    parser.add_argument("--seeds", type=positive_int, default=300, help="training seeds per cell of the transcripts")
    parser.add_argument("--learning-rate", type=positive_float, default=1e-3)
    parser.add_argument("--counters", action="store_true",
                        help="rows: only the defend counters whose numbers differ from the plan on the table")
    parser.add_argument("--skills", default=",".join(SKILLS),
                        help=f"comma-separated skills whose chances give the rows (default: {','.join(SKILLS)})")
    args = parser.parse_args()
    skills = tuple(s.strip() for s in args.skills.split(",") if s.strip())
    if not skills or set(skills) - set(SKILLS):
        raise SystemExit(f"--skills {args.skills!r}: name one or more of {', '.join(SKILLS)}, comma-separated")
    if args.counters and "defend" not in skills:
        raise SystemExit(f"--counters takes the defend skill's counters; --skills {args.skills!r} leaves it out")
    source = Path(args.model or resolve_default_model())
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"--out {out} is not an empty directory; give a new one")
    if not (source / "config.json").is_file():
        raise SystemExit(f"--model {source} is not a model directory (no config.json)")
    record = source / BUILD_INFO_FILE  # a default-model build's recipe; another model takes the recipe's defaults
    info = json.loads(record.read_text()) if record.is_file() else {}
    cfg = DefaultModelConfig.model_validate(info.get("config", {}))
    torch.set_num_threads(cfg.torch_threads)
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source)
    scientist, _, stats = collect_transcripts(args.seeds, skill_rate=cfg.skill_rate, shuffle_seed=DECISION_SEED,
                                              lab_thrifty_rate=cfg.lab_thrifty_rate, max_rounds=cfg.max_rounds,
                                              marked_skills=skills)
    decisions = [tokenize_example(tokenizer, t[k]) for t in scientist for k in range(1, len(t))
                 if is_skill_chance(t[k]) and (not args.counters or _counter_off_plan(t, k))]
    replay_sci, replay_lab, _ = collect_transcripts(args.seeds, skill_rate=cfg.skill_rate, shuffle_seed=REPLAY_SEED,
                                                    lab_thrifty_rate=cfg.lab_thrifty_rate, max_rounds=cfg.max_rounds)
    replay = [tokenize_example(tokenizer, ex) for _, ex in training_examples(replay_sci, replay_lab)]
    random.Random(REPLAY_SEED).shuffle(replay)
    rows = decisions + replay[:len(decisions)]
    what = "defend counters off the plan" if args.counters else f"turns at a chance of {'+'.join(skills)}"
    print(f"{len(decisions)} {what} (uses {stats.skill_uses} of "
          f"{stats.skill_chances}) and "
          f"{len(decisions)} whole chats; {args.steps} steps at learning rate {args.learning_rate}")
    result = run_sft(model, tokenizer, rows, cfg.sft, max_length=max(len(r["input_ids"]) for r in rows),
                     max_steps=args.steps, completion_only=True, learning_rate=args.learning_rate)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / FINE_TUNE_FILE).write_text(json.dumps({"source": str(source), "source_fingerprint": info.get("fingerprint"),
                                                  **vars(args), "decision_rows": len(decisions),
                                                  "mean_loss": result.mean_loss}, indent=2) + "\n")
    print(f"wrote {out} (mean loss {result.mean_loss:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
