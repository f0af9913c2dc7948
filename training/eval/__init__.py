"""Evaluation: ``run`` (``replicalab eval``: agents as the Scientist on one seed split, paired by seed),
``stats`` (stratified bootstrap intervals), ``report`` (markdown tables and plots) and ``seat_check`` (a model
in both seats against scripted opponents, the check every default-model build runs).  Aggregates of
EpisodeLogs are ``replicalab.metrics``.
"""
