"""The fast tier stays fast: a test not marked slow cannot start Ray (tests/conftest.py)."""

import pytest


def test_fast_tier_refuses_to_start_ray():
    ray = pytest.importorskip("ray")
    with pytest.raises(RuntimeError, match="starts Ray: mark it @pytest.mark.slow"):
        ray.init(num_cpus=1, include_dashboard=False)
    assert not ray.is_initialized()


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
