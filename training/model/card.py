"""The default model's card (``README.md`` in its directory) and its recorded evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from replicalab.seeds import split_of

#: The build record written next to the weights (config, data, SFT phases, evaluation).
BUILD_INFO_FILE = "build_info.json"


def record_evaluation(model_dir: Path | str, evaluation: Any, flag_copy: Optional[list] = None) -> None:
    """Store a ``training.eval.seat_check.ModelEvaluation`` (and the Lab Manager's ``training.eval.flag_copy``
    rows) in ``build_info.json`` and the model card."""
    model_dir = Path(model_dir)
    info = json.loads((model_dir / BUILD_INFO_FILE).read_text())
    info["evaluation"] = evaluation.model_dump(mode="json")
    if flag_copy is not None:
        info["flag_copy"] = [row.model_dump(mode="json") for row in flag_copy]
    (model_dir / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    (model_dir / "README.md").write_text(model_card(info))


def _seat_row(seat: str, opponent: str, r: dict[str, Any], baseline: str) -> str:
    parsed = r["model_turns"] - r["parse_failures"]
    return (f"| {seat} | {opponent} | {r['parse_rate']:.1%} ({parsed}/{r['model_turns']}) | "
            f"{r['valid_turn_rate']:.1%} | {r['mean_reward']:.3f} | {baseline} {r['baseline_mean_reward']:.3f} |")


def _flag_copy_lines(rows: Optional[list[dict[str, Any]]]) -> list[str]:
    if not rows:
        return []
    cells = ", ".join(f"{r['flag']} {str(r['value']).lower()} {r['mean_probability']:.2f}"
                      + (f" (wrong in {r['wrong']} of {r['views']})" if r["wrong"] else "") for r in rows)
    return [f"Lab Manager flag copy (`training.eval.flag_copy`, teacher-forced P(the lab's value), "
            f"{sum(r['views'] for r in rows if r['flag'] == rows[0]['flag'])} views): {cells}.", ""]


def _evaluation_lines(ev: Optional[dict[str, Any]]) -> list[str]:
    if not ev:
        return ["Not evaluated yet (`replicalab build-default-model` evaluates after building).", ""]
    sci, lab = ev["scientist"], ev["lab_manager"]
    seeds = ev["seeds"]
    return [
        f"Greedy decoding (max_new_tokens {ev['max_new_tokens']}), `training.eval.seat_check.evaluate_model_seats` on "
        f"{split_of(seeds[0]) or 'unsplit'} seeds {seeds[0]}..{seeds[-1]} x every template x every difficulty "
        f"({sci['episodes']} episodes per seat), rollouts by `training.rollout.play.play_jobs`:",
        "",
        "| seat | opponent | parse rate | valid turns | mean reward | baseline on the same episodes |",
        "|---|---|---|---|---|---|",
        _seat_row("Scientist", "scripted Lab Manager", sci, "NaiveScientist"),
        _seat_row("Lab Manager", "NaiveScientist", lab, "scripted Lab Manager"),
        "",
        "Scientist mean reward by difficulty: "
        + ", ".join(f"{d} {r:.3f}" for d, r in sci["mean_reward_by_difficulty"].items()) + ".",
        "",
    ]


def model_card(info: dict[str, Any]) -> str:
    """The checkpoint's README.md: how it was made and, once evaluated, how it plays."""
    cfg, tr, sft = info["config"], info["transcripts"], info["sft"]
    seeds = tr["seeds"]
    arch = cfg["architecture"]
    return "\n".join([
        "# ReplicaLab embedded default model",
        "",
        "A tiny Qwen2-architecture causal LM with a byte-level BPE tokenizer, both built locally from",
        "`training.config.model.DefaultModelConfig` (no hub download) by `training.model.default.build_default_model`,",
        "then warm-started by supervised fine-tuning (TRL `SFTTrainer` via `training.model.sft.run_sft`, in the phases",
        "under Training) on transcripts of ReplicaLab's scripted agents. It plays either seat: the system prompt says",
        "which role it has.",
        "",
        *([f"Fingerprint `{info['fingerprint']}` (`training.model.fingerprint`: recipe version "
           f"{info.get('recipe_version')}, the config, the chat template, the first training seeds' SFT "
           "transcripts); `resolve_default_model` uses this build while the code's fingerprint is the same.", ""]
          if info.get("fingerprint") else []),
        "## Architecture",
        f"- parameters: {info['parameters']:,}; vocabulary: {info['vocab_size']} tokens "
        f"(`<|endoftext|>` pads, `<|im_end|>` ends a turn and is the only stop token)",
        f"- {json.dumps(arch)}",
        "- chat template: `<|im_start|>role\\ncontent<|im_end|>` per message",
        f"- tokenizer: BPE (at most {cfg['vocab_size']} tokens) plus whole JSON tokens seen at least "
        f"{cfg['json_token_min_frequency']} times (`\"controls\":[`, `,\"hela_cells\"`, `co2_incubator`) and the "
        f"integers 0..{max(cfg['number_tokens'] - 1, 0)}, so protocol fields copy token for token",
        *([f"- copy circuit: layers 0-1 start as a previous-token head + induction head "
           f"(`training.model.copy_circuit`; {info.get('copy_circuit', {})})"] if arch.get("copy_circuit") else []),
        "",
        "## Data",
        f"- {tr['episodes']} scripted episodes: training seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} seeds, "
        "from `TRAIN_SEEDS` only) x every template x every difficulty",
        f"- Scientist seat: a scripted Scientist that decides per chance: at each turn where a skill's trigger "
        f"shows it uses the skill with probability {cfg.get('skill_rate')} (chances per skill: "
        f"{tr.get('skill_chances', {})}, uses: {tr.get('skill_uses', {})}); {tr.get('chance_turns_used', 0)} of "
        f"{tr.get('chance_turns', 0)} turns at a skill's chance use it",
        f"- Lab Manager seat: `ScriptedLabManager` deciding per turn, the thrifty move with probability "
        f"{cfg.get('lab_thrifty_rate')}, else the cooperative one; it learns from every episode",
        f"- turns: {tr['examples_scientist']} scientist, {tr['examples_lab_manager']} lab manager, in the rollouts' "
        "append-only chat format (`replicalab.prompts.RoleChat`: turn 1 = `build_messages`, turn k = the chat so far "
        "+ the reply + `followup_message`); each seat's whole episode is one example with the loss on every "
        "assistant turn, plus extra copies of each Scientist opening turn "
        f"({cfg['scientist_first_turn_repeats']}) and of each Scientist turn at a skill's chance "
        f"({cfg.get('scientist_decision_turn_repeats', 0)})",
        f"- {info.get('examples', '?')} examples; longest {info['max_example_tokens']} tokens "
        f"(mean {info['mean_example_tokens']:.0f}); SFT max_length {sft['max_length']}",
        f"- mean reward of the recorded episodes: {tr['mean_reward_recorded']:.3f}",
        "",
        "## Training",
        f"- SFT hyperparameters: {json.dumps(cfg['sft'])}",
        *(f"- phase {i + 1} ({p.get('loss') or ('assistant-turn loss' if p['completion_only'] else 'loss on all tokens')}): "
          f"{p['steps']} optimizer steps in {p['seconds']:.0f}s, mean training loss {p['mean_loss']:.4f}"
          for i, p in enumerate(info["sft_phases"])),
        f"- total build time {info['build_seconds']:.0f}s wall, {info['cpu_seconds']:.0f}s CPU, "
        f"{cfg['torch_threads']} torch threads (torch {info['torch']})",
        "",
        "## Evaluation",
        *_evaluation_lines(info.get("evaluation")),
        *_flag_copy_lines(info.get("flag_copy")),
        "## Use",
        "```python",
        "from training.rollout.policy import PolicyModel",
        "policy = PolicyModel('<this directory>')",
        "```",
        "or `replicalab play --scientist model:<this directory>`.",
        "",
    ])
