"""Every model name resolves to a local directory before a run starts (``training.model.snapshot``): a hub id is
downloaded once from the hub (here a stand-in on localhost, ``tests/hub_standin.py``) into a fresh cache, read
from the cache when ``HF_HUB_OFFLINE`` is set, and refused in one line when neither works."""

from pathlib import Path

import pytest
from hub_standin import serve_hub

from training.errors import UserInputError

HUB_ID = "someone/tiny-model"


@pytest.fixture
def hub_model(policy_tiny_model_dir) -> Path:
    return policy_tiny_model_dir


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, online (huggingface_hub reads its settings once, at import: set them there)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    return cache


@pytest.fixture
def hub(hub_model, fresh_cache, monkeypatch):
    from huggingface_hub import constants

    with serve_hub({HUB_ID: hub_model}) as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        yield server


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert text and "\n" not in text
    return text


def test_hub_id_downloads_once_into_a_fresh_cache_then_reads_it_offline(hub, fresh_cache, monkeypatch):
    from huggingface_hub import constants

    from training.model.snapshot import local_model_dir, local_model_dirs

    where = Path(local_model_dir(HUB_ID))
    assert where.is_dir() and fresh_cache in where.parents  # the snapshot, in the cache
    assert (where / "config.json").is_file() and (where / "model.safetensors").is_file()
    downloads = [r for r in hub.requests if r.startswith("GET") and "/resolve/" in r]
    assert len(downloads) == len({r for r in downloads}) >= 4  # each file fetched once
    # several names, the same model twice: resolved once
    hub.requests.clear()
    dirs = local_model_dirs([HUB_ID, HUB_ID])
    assert list(dirs) == [HUB_ID] and dirs[HUB_ID] == str(where)
    assert not [r for r in hub.requests if r.startswith("GET") and "/resolve/" in r]  # cached files stay
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.requests.clear()
    assert local_model_dir(HUB_ID) == str(where)  # offline: the cache, no request
    assert hub.requests == []


def test_offline_without_the_cache_names_the_model(fresh_cache, monkeypatch):
    from huggingface_hub import constants

    from training.model.snapshot import local_model_dir

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserInputError) as err:
        local_model_dir(HUB_ID)
    text = _one_line(err)
    assert HUB_ID in text and "HF_HUB_OFFLINE is set" in text and "not in the Hugging Face cache" in text


def test_unknown_hub_id_is_one_line(hub):
    from training.model.snapshot import local_model_dir

    with pytest.raises(UserInputError) as err:
        local_model_dir("someone/not-there")
    text = _one_line(err)
    assert "'someone/not-there' could not be downloaded" in text


def test_local_directories_and_seats(hub_model, tmp_path):
    from training.model.snapshot import local_model_dir, seat_models

    assert local_model_dir(str(hub_model)) == str(hub_model)
    with pytest.raises(UserInputError, match="does not exist"):
        local_model_dir(str(tmp_path / "missing"))  # a path is never a hub lookup
    assert seat_models(["policy", "model:a/b", "scripted", "model:./x", "model:a/b"]) == ["a/b", "./x"]


def test_frozen_seats_load_from_the_resolved_directory(hub_model, fresh_cache, monkeypatch):
    """A worker (offline, another cache) loads a ``model:HUB_ID`` seat from the directory the driver resolved."""
    from huggingface_hub import constants

    from training.rollout.play import load_frozen

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserInputError, match="cache"):
        load_frozen([f"model:{HUB_ID}"], device="cpu")
    frozen = load_frozen([f"model:{HUB_ID}", "scripted"], device="cpu", model_dirs=[(HUB_ID, str(hub_model))])
    assert list(frozen) == [f"model:{HUB_ID}"]
