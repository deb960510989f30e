"""F2 compares each size alone with the same size together: a prompt too short for its request id
grows to fit, and it must grow alike in both roles (the ids 'alone0-' and 'together1-' differ in
length), and the verdict names the sizes as sent, not as planned."""

from __future__ import annotations

from tests.fakes.fairness_harness import run_check_events


async def test_a_grown_prompt_is_the_same_alone_and_together_and_named_as_sent():
    verdict, events = await run_check_events("F2", tokenize_chars_per_token=1)  # an id of c chars is c tokens
    f2 = [e for e in events if e.check == "F2"]
    sizes = {}
    for e in f2:
        sizes.setdefault(e.seq, set()).add(e.prompt_tokens)
    assert all(len(s) == 1 for s in sizes.values()), sizes
    smallest = sizes[0].pop()
    assert smallest > 16  # planned 16: too short for the id, so it grew (else this test proves nothing)
    assert f"sizes [({smallest}, 8), (32, 16)" in verdict.derivation, verdict.derivation
