"""``replicalab bench {env,rollout,train,generate}``: benchmarks that print their figures next to a
baseline measured in the same run.  ``env`` needs only the core install.
"""
