"""What Ray Tune needs from a ``SweepConfig``: the search space, the search algorithm, the scheduler and each
trial's resources (a placement group from the trial's own placement plan)."""

from __future__ import annotations

from typing import Any, Callable

from training.config.sweep import Range, SweepConfig
from training.sweep.trial import trial_config

#: The report field a trial's score is in, and the one Tune's schedulers count time in (the training step).
SCORE, STEP = "score", "step"


def search_space(sweep: SweepConfig) -> dict[str, Any]:
    """Tune's search space: grid values as ``tune.grid_search``; for random search a list is ``tune.choice``,
    a range ``tune.uniform`` or ``tune.loguniform``."""
    from ray import tune

    if sweep.method == "grid":
        return {key: tune.grid_search(list(values)) for key, values in sweep.search.items()}
    space: dict[str, Any] = {}
    for key, values in sweep.search.items():
        if isinstance(values, Range):
            space[key] = (tune.loguniform if values.log else tune.uniform)(values.low, values.high)
        else:
            space[key] = tune.choice(list(values))
    return space


def search_algorithm(sweep: SweepConfig) -> Any:
    """Tune's basic variant generator, seeded (the same sweep config draws the same random points)."""
    from ray.tune.search.basic_variant import BasicVariantGenerator

    return BasicVariantGenerator(random_state=sweep.seed, max_concurrent=sweep.max_concurrent_trials)


def scheduler(sweep: SweepConfig) -> Any:
    """The configured trial scheduler, its clock the training step (None: every trial trains to the end)."""
    s = sweep.scheduler
    if s.kind == "none":
        return None
    from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

    if s.kind == "asha":
        max_t = max(trial_config(sweep, params).grpo.max_steps for params in sweep.trials())
        return ASHAScheduler(time_attr=STEP, max_t=max_t, grace_period=s.grace_period,
                             reduction_factor=s.reduction_factor)
    return MedianStoppingRule(time_attr=STEP, grace_period=s.grace_period,
                              min_samples_required=s.min_samples_required)


def trial_resources(sweep: SweepConfig) -> Callable[[dict[str, Any]], Any]:
    """``params -> PlacementGroupFactory``: the bundles of the trial's own placement plan on the connected
    cluster (the learner's CPUs and GPUs first, then each rollout worker's), so concurrent trials never hold
    more than the cluster has; the trial's rollout backend places its workers in them."""
    from ray.tune import PlacementGroupFactory

    from training.cluster.placement_group import trial_bundles
    from training.cluster.preflight import preflight
    from training.cluster.resources import ClusterResources

    cluster = ClusterResources.from_ray()

    def resources(params: dict[str, Any]) -> PlacementGroupFactory:
        cfg = trial_config(sweep, {k: params[k] for k in sweep.search if k in params})
        plan = preflight(cfg, cluster, lora=cfg.lora.enabled, log=False)
        return PlacementGroupFactory(trial_bundles(plan, sweep.cpus_per_trial), strategy=plan.strategy)

    return resources
