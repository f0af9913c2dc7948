"""``replicalab sweep``: trials of ``replicalab train`` on Ray Tune.  ``space`` (the config's search as Tune's
search space, its scheduler, each trial's resources), ``trial`` (one trial: train, report the metric at every
logged value, resume from its own checkpoints), ``run`` (the sweep, new or resumed) and ``report`` (the table,
the best config and the plots)."""
