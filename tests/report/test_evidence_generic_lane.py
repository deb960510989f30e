"""A lane whose server is not llama.cpp is not described as one: terminal title, EVIDENCE.md's
server caption, build limitation and how its prompts were built (text, not token ids)."""

from __future__ import annotations

from satbench.metrics.flags import Flag, FlagKind
from satbench.records.manifest import RuntimeInfo
from satbench.report.document import render_markdown
from satbench.report.evidence import evidence_blocks
from satbench.report.table import lane_title
from tests.report.test_compare import lane, results

GENERIC = RuntimeInfo(kind="url", name="running server (given by --url)", llamacpp=False,
                      base_url="http://127.0.0.1:8000", model_alias="fake-model")


def _generic(name: str = "vllm"):
    return lane(name).model_copy(update={"runtime": GENERIC})


def _evidence(*lanes) -> str:
    return render_markdown(evidence_blocks(results(*lanes), None, None, [], []))


def test_a_generic_lane_title_does_not_claim_llama_cpp():
    title = lane_title(_generic())
    assert "llama.cpp build" not in title and "n/a on n/a" not in title
    assert "url server, not llama.cpp" in title
    assert "embedded llama.cpp b11549 on CUDA0" in lane_title(lane())  # a llama.cpp lane is named as before


def test_evidence_of_a_generic_lane_says_text_prompts_and_no_llama_cpp_server():
    text = _evidence(_generic())
    assert "own llama.cpp server" not in text and "token ids" not in text
    assert "this llama.cpp build" not in text
    assert "Each lane's own server" in text and "this server build" in text
    assert "vllm: text: a unique prefix, then filler words, about 64 words per sweep request" in text
    assert "server_prompt_tokens" in text


def test_evidence_of_a_llama_cpp_lane_keeps_token_ids_and_names_each_lane():
    text = _evidence(lane("dense"))
    assert "Each lane's own llama.cpp server" in text and "this llama.cpp build" in text
    assert "dense: token ids: a unique text prefix, then filler tokens, 64 per sweep request" in text
    both = _evidence(lane("dense"), _generic())
    assert "dense: token ids" in both and "vllm: text:" in both and "Each lane's own server" in both


def test_token_figures_of_a_server_that_gave_no_count_are_marked_approximate():
    """Without usage, satbench counts SSE chunks as tokens: out tok/s, ITL and TPOT say ≈ in the
    table (and the legend says why); a level with exact counts is unmarked."""
    from satbench.report.table import LEVEL_LEGEND, level_row
    from tests.report.test_compare import level as make_level

    exact = make_level(2)
    approx = make_level(2).model_copy(update={"flags": [
        Flag.of(FlagKind.TOKEN_COUNT_APPROXIMATE, "the server reported no exact token count")]})
    row, plain = level_row(approx), level_row(exact)
    assert [c[0] for c in (row[1], row[4], row[5])] == ["≈"] * 3
    assert row[2] == plain[2] and row[3] == plain[3]  # req/s and TTFT do not count tokens
    assert not any(c.startswith("≈") for c in plain)
    assert "≈ = tokens counted as SSE chunks" in LEVEL_LEGEND
