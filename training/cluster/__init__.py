"""The cluster a run is placed on, planned before anything loads: ``resources`` (GPUs, CPUs, memory per
node; from Ray or by hand), ``memory`` (estimates from a model's config.json), ``plan`` (``plan_placement``:
which process holds which GPUs, or one line saying why a layout cannot work), ``plan_table`` (the pre-flight
table), ``preflight`` (a run's plan, ``replicalab preflight``), ``placement_group`` (the plan reserved in
Ray) and ``ray_session`` (joining or starting Ray, and cleaning up after a killed driver)."""
