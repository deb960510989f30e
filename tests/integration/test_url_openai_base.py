"""`--url` given as an OpenAI base URL (…/v1, as LiteLLM and OpenAI clients write it) measures the same
server as its root: requests go to the server's own paths, and the run records the root."""

from __future__ import annotations

import json

from satbench.cli.main import main


def test_a_sweep_of_a_v1_base_url_measures_the_root(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    out = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url + "/v1/", "--concurrency", "1", "--repetitions", "1",
                 "--requests-per-level", "4", "--prompt-tokens", "16", "--output-tokens", "4",
                 "-o", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    lane = results["lanes"][0]
    assert lane["runtime"]["base_url"] == fake.base_url
    assert lane["levels"][0]["counts"]["requests_ok"] == 4
