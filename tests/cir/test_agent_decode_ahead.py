"""X^R agent calls played by a local (hf:) model: the next calls' images decoded ahead in decode workers."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from unirag.cir.agent_runner import AgentRunner
from unirag.cir.cache import CallCache
from unirag.cir.config import RoleConfig, XRConfig, XRSettings
from unirag.errors import InputError
from unirag.generators.base import Generation
from unirag.messages import ImagePart


class PixelCaptioner:
    """A stand-in local VLM: loads each call's images as the HF backend does (``ImagePart.load``) and
    "captions" them with a digest of their pixels, so the reply shows exactly what it was given."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def generate(self, messages, options=None) -> Generation:
        digests = [hashlib.sha256(np.asarray(p.load()).tobytes()).hexdigest()[:12]
                   for m in messages for p in m.parts if isinstance(p, ImagePart)]
        self.seen.append(digests)
        return Generation(text="photo " + " ".join(digests))


def _photos(coco_mini: Path, n: int) -> list[Path]:
    return sorted((coco_mini / "images").glob("*.jpg"))[:n]


def _run(photos: list[Path], cache_dir: Path, workers):
    gen = PixelCaptioner()
    config = XRConfig(roles={"caption": RoleConfig(model="hf:stand-in")},
                      settings=XRSettings(decode_workers=workers))
    runner = AgentRunner(config, CallCache(cache_dir), generator_factory=lambda spec, **_: gen, progress=False)
    requests = [runner.request("caption", image=p, text="Describe the image.")
                for p in photos]
    try:
        return runner.run("caption", requests), gen.seen
    finally:
        runner.close()


def test_local_agent_calls_get_their_images_decoded_ahead_and_the_same_replies(coco_mini, tmp_path, decoded_here):
    photos = _photos(coco_mini, 6)
    got = {}
    for workers in (0, 2):
        decoded_here.clear()
        out, seen = _run(photos, tmp_path / f"cache{workers}", workers)
        got[workers] = (out, seen, list(decoded_here))
    assert len(got[0][2]) == 6  # inline: every call's image decoded in the model's process
    assert got[2][2] == []
    assert got[2][0] == got[0][0] and all(v is not None for v in got[0][0].values())
    assert got[2][1] == got[0][1] and len(got[0][1]) == 6


def test_an_unreadable_image_fails_the_agent_call_with_the_inline_message(coco_mini, tmp_path, decoded_here):
    photos = []
    for p in _photos(coco_mini, 4):
        photos.append(tmp_path / "img" / p.name)
        photos[-1].parent.mkdir(exist_ok=True)
        shutil.copy(p, photos[-1])
    photos[2].write_bytes(b"not an image at all")
    messages = {}
    for workers in (0, 2):
        decoded_here.clear()
        with pytest.raises(InputError) as e:
            _run(photos, tmp_path / f"cache{workers}", workers)
        messages[workers] = str(e.value)
        if workers == 2:
            assert decoded_here == [photos[2].name]
    assert "cannot decode image" in messages[0] and photos[2].name in messages[0]
    assert messages[2] == messages[0]


def test_bad_decode_workers_setting_is_a_config_error():
    from unirag.errors import ConfigError

    with pytest.raises(ConfigError, match="decode workers"):
        XRSettings(decode_workers=-1)


def test_agents_yaml_and_run_cir_set_the_decode_workers(tmp_path):
    from unirag.cir.config import load_config

    path = tmp_path / "agents.yaml"
    path.write_text("roles: {caption: {model: 'hf:x'}}\nsettings: {decode_workers: 0}\n")
    assert load_config(path).settings.decode_workers == 0
    path.write_text("roles: {caption: {model: 'hf:x'}}\nsettings: {decode_workers: many}\n")
    from unirag.errors import ConfigError

    with pytest.raises(ConfigError, match="decode workers"):
        load_config(path)


def test_the_agents_yaml_setting_reaches_the_ray_workers_unless_the_engine_sets_it(tmp_path):
    """One setting: ``settings.decode_workers`` (the agents YAML or ``--decode-workers``) also sizes the
    Ray workers' decode processes, where the engine options leave them to auto."""
    from unirag.runs.engine import EngineOptions

    def engine_of(setting, engine):
        config = XRConfig(roles={"caption": RoleConfig(model="hf:x")}, settings=XRSettings(decode_workers=setting))
        return AgentRunner(config, CallCache(tmp_path), progress=False, engine=engine).engine

    assert engine_of(3, EngineOptions(engine="ray")).decode_workers == 3
    assert engine_of(3, "ray").decode_workers == 3
    assert engine_of(3, EngineOptions(engine="ray", decode_workers=1)).decode_workers == 1
    assert engine_of(None, EngineOptions(engine="ray")).decode_workers is None
    assert engine_of("auto", EngineOptions(engine="ray")).decode_workers is None
