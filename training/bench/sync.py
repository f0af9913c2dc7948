"""``replicalab bench sync``: bytes and seconds per weight sync, learner -> Ray rollout workers, collective vs
object store, in the same run.

    replicalab bench sync [--shape 0.5b|tiny] [--syncs 3] [--bucket-mib 256] [--workers 1]

The learner's weights are a stand-in with Qwen2.5-0.5B's shapes (hidden 896, 24 layers, 14 heads, 2 kv heads,
intermediate 4864, vocab 151936, tied embeddings: 494M parameters), random, in bfloat16; it is saved once
(with a small tokenizer) so the workers load the same architecture.  For each path (``rollout.weight_sync``)
a ``RayBackend`` with ``--workers`` CPU workers is started and ``--syncs`` syncs of the same weights are timed
(``set_weights`` until every worker confirmed the version); the first collective sync also forms the group,
so the first sync and the median of the others are printed apart.  Bytes per sync: the collective's payload
(the model's dtype) and the float32 arrays put into the object store, tied tensors once in both.  After the
last sync of each path every worker's weights are compared with the learner's, bit for bit (SHA-256 of every
tensor in the worker's dtype).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from training.argtypes import positive_int
from training.rollout.collective_sync import DEFAULT_BUCKET_MIB

#: Qwen2.5-0.5B's shapes (its config.json), for the stand-in's Qwen2Config.
SHAPES: dict[str, dict[str, Any]] = {
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=4096),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512, tie_word_embeddings=True, max_position_embeddings=512),
}
DEFAULT_SYNCS = 3
PATHS = ("collective", "object_store")
GB = 1e9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b", help="the stand-in's shapes")
    parser.add_argument("--syncs", type=positive_int, default=DEFAULT_SYNCS, help="timed syncs per path")
    parser.add_argument("--bucket-mib", type=positive_int, default=DEFAULT_BUCKET_MIB,
                        help="bucket size of the collective path (rollout.weight_sync_bucket_mib)")
    parser.add_argument("--workers", type=positive_int, default=1, help="Ray rollout workers (CPU)")


def build_standin(shape: str, out: Path) -> dict[str, Any]:
    """Save a random bfloat16 Qwen2 model of ``shape`` and a small tokenizer in ``out``; return its weights."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from training.model.tokenizer import save_and_verify, train_tokenizer

    torch.manual_seed(0)
    config = Qwen2Config(**SHAPES[shape])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(str(out))
    texts = ["The Scientist proposes a protocol; the Lab Manager answers from the lab."] * 4
    save_and_verify(train_tokenizer(texts, vocab_size=300, min_frequency=1), out, probes=texts[:1])
    with torch.no_grad():  # what the workers hold must differ from what is sent
        for p in model.parameters():
            p.neg_()
    return {k: v.detach() for k, v in model.state_dict().items()}


def object_store_bytes(state: dict[str, Any]) -> int:
    """Bytes the object-store path puts per sync: float32 arrays, tied ones once."""
    from training.rollout.sync_wire import plan_layout
    from training.rollout.collective_sync import MIB

    return sum(e.nbytes // state[e.name].element_size() * 4 for e in plan_layout(state, MIB).entries)


def _matches(held: dict[str, tuple[str, str]], state: dict[str, Any]) -> bool:
    """A worker's digests (``state_digests``) equal those of the learner's tensors in the worker's dtypes."""
    import torch

    from training.rollout.sync_wire import tensor_digest

    return set(held) == set(state) and all(
        tensor_digest(state[k].to(getattr(torch, dtype))) == digest for k, (dtype, digest) in held.items())


def _measure(path: str, model_dir: Path, state: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from training.config.model import SamplingConfig
    from training.rollout.contract import RolloutSpec
    from training.rollout.ray_backend import RayBackend, RayPool

    spec = RolloutSpec(model=str(model_dir), scientist="policy", lab_manager="scripted",
                       sampling=SamplingConfig(max_new_tokens=8, seed=0), max_rounds=1)
    backend = RayBackend(spec, RayPool(num_workers=args.workers, weight_sync=path, sync_bucket_mib=args.bucket_mib))
    seconds = []
    try:
        for version in range(1, args.syncs + 1):
            tick = time.perf_counter()
            backend.set_weights(state, version)
            seconds.append(time.perf_counter() - tick)
        collective = path == "collective" and backend.sync is not None and backend.sync.members == backend.names
        sent = backend.sync.last_layout.payload_bytes if collective else object_store_bytes(state)
        exact = all(_matches(held, state) for held in ray.get([w.state_digests.remote() for w in backend.workers]))
    finally:
        backend.close()
    rest = seconds[1:] or seconds
    return dict(path=path if path != "collective" or collective else "collective (fell back)", bytes=sent,
                first_s=seconds[0], median_s=statistics.median(rest), exact=exact, n=len(rest))


def run(args: argparse.Namespace) -> int:
    import torch

    from training.cluster.ray_session import connect

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        tick = time.perf_counter()
        state = build_standin(args.shape, Path(tmp))
        params = sum(v.numel() for k, v in state.items() if k != "lm_head.weight")
        print(f"stand-in {args.shape}: {params / 1e6:.0f}M parameters, bfloat16, built in "
              f"{time.perf_counter() - tick:.1f} s; {args.workers} Ray worker(s) on CPU, {args.syncs} syncs per path, "
              f"buckets of {args.bucket_mib} MiB")
        session = connect()
        try:
            rows = [_measure(path, Path(tmp), state, args) for path in PATHS]
        finally:
            session.close()
    print(f"{'path':<24} {'GB/sync':>8} {'first s':>8} {'median s':>9} {'GB/s':>6}  bitwise")
    for row in rows:
        print(f"{row['path']:<24} {row['bytes'] / GB:>8.3f} {row['first_s']:>8.2f} {row['median_s']:>9.2f} "
              f"{row['bytes'] / GB / row['median_s']:>6.2f}  {'yes' if row['exact'] else 'NO'}")
    base, new = rows[1], rows[0]
    print(f"collective vs object store: {new['bytes'] / base['bytes']:.2f}x the bytes, "
          f"{base['median_s'] / new['median_s']:.2f}x faster per sync (median of {new['n']})")
    return 0 if all(row["exact"] for row in rows) else 1
