"""Evaluation: ``run`` (``replicalab eval``: agents as the Scientist on one seed split, paired by seed),
``stats`` (stratified bootstrap intervals), ``league`` (Bradley-Terry ratings of each role's seats),
``exploitability`` (each non-scripted seat's best scripted response), ``report`` and ``report_league``
(markdown tables and plots), ``seat_check`` (a model in both seats against scripted opponents) and
``flag_copy`` (whether its Lab Manager copies each flag from the lab's check): the checks every default-model
build runs.  Aggregates of EpisodeLogs are ``replicalab.metrics``.
"""
