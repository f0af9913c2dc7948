"""The fast tier stays fast: a test not marked slow cannot start Ray (tests/conftest.py)."""

import pytest


def test_fast_tier_refuses_to_start_ray():
    ray = pytest.importorskip("ray")
    before = ray.is_initialized()  # a slow test earlier in a full run may hold a session-scoped cluster
    with pytest.raises(RuntimeError, match="starts Ray: mark it @pytest.mark.slow"):
        ray.init(num_cpus=1, include_dashboard=False)
    assert ray.is_initialized() == before


@pytest.mark.slow
def test_slow_tests_may_start_ray():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, logging_level="WARNING")
    try:
        assert ray.is_initialized()
    finally:
        if started:
            ray.shutdown()
