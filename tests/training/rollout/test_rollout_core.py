"""play_jobs: exact trajectories, and a context window too small for the first prompt."""

from training.config.model import SamplingConfig
from training.rollout.play import CONTEXT_EXHAUSTED, play_jobs
from training.rollout.policy import PolicyModel
from training.rollout.records import EpisodeJob


def test_context_exhausted_on_the_first_turn_is_an_invalid_turn(policy_tiny_model_dir):
    policy = PolicyModel(str(policy_tiny_model_dir), device="cpu")  # 512 positions: game prompts do not fit
    jobs = [EpisodeJob(job_id=i, seed=i, template="cell_biology", difficulty="easy", role="scientist") for i in range(2)]
    records = play_jobs(policy, jobs, scientist="policy", lab_manager="scripted",
                        sampling=SamplingConfig(do_sample=False, max_new_tokens=16))
    for r in records:
        assert r.log.terminated and not r.log.agreement_reached
        assert [t.error for t in r.log.turns if t.role == "scientist"] == [CONTEXT_EXHAUSTED] * 2
        t = r.trajectory
        assert t.turns == 0 and t.parse_failures == 2 and t.completion_ids == [] and t.env_mask == []
