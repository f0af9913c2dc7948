"""Configs of every entry point, as strict pydantic models (unknown keys fail), importable without torch.

``train.TrainConfig`` (``replicalab train``), ``eval.EvalConfig`` (``replicalab eval``), ``sweep.SweepConfig``
(``replicalab sweep``) and ``model.DefaultModelConfig`` (``replicalab build-default-model``); ``loading``
merges YAML files and ``KEY=VALUE`` overrides into their defaults.  Seat specs (``policy``,
``scripted:NAME``, ``model:DIR``) are parsed by ``replicalab.seats``, the one vocabulary of roles and seats.
"""
