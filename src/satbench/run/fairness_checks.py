"""Each fairness check's workload on a lane's server (run.fairness_traffic sends and records it):
F1 equal requests, F2 mixed sizes, F3 backlogged clients, S1 a decode stall, S2 prompt admission,
S3 prompt against prompt. Each runs its base rounds, then one more round at a time while its
verdict on the events so far is marginal, up to its cap (`rounds`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from satbench.config.schema import CheckName
from satbench.run.fairness_traffic import CheckTraffic, wait_for_tokens
from satbench.workload.fairness_plan import (
    F1_DECODE_TARGET_MS,
    REFERENCE_SETS,
    REFERENCES,
    S1_REFERENCES,
    FairnessPlan,
    check_requests,
    s3_prompt_tokens,
)

WATCH_TOKENS = 8  # decoders are "steady" once each has this many tokens
PAIR_GAP_S = 0.010  # S3: the second prompt follows the first by 10 ms
SIZES_GAP_S = 0.001  # F2: its sizes are sent together, this far apart
F1_OUTPUT_MAX = 1024  # F1's requests stay this short however fast the server decodes


async def rounds(t: CheckTraffic, check: CheckName, one_round: Callable[[int], Awaitable[None]]) -> None:
    """The check's base rounds, then one more at a time while its verdict on the events so far
    is marginal, up to its cap."""
    cfg = t.s.lane.fairness
    base, cap = cfg.rounds(check)
    for rep in range(1, base + 1):
        await one_round(rep)
    rep = base
    while rep < cap and t.judge.verdict(check, t.events, t.plan, cfg) == "marginal":
        rep += 1
        await one_round(rep)
    _, per_round = check_requests(t.plan, cfg).get(check, (0, 0))
    t.progress.skip(per_round * (cap - rep))  # the top-ups a decided check did not need


async def references(t: CheckTraffic, check: CheckName, per_set: int,
                     one_set: Callable[[int], Awaitable[None]]) -> None:
    """The check's lone references, a set of `per_set` requests at a time: another set (role
    `…_again`, analysis.checks.REFERENCE_ROLES) while the latest is too unsteady to serve (the
    verdict judges the last), up to REFERENCE_SETS."""
    for k in range(REFERENCE_SETS):
        if k:
            t.progress.skip(-per_set)  # not in the planned total
        await one_set(k)
        if not t.judge.references_unsteady(check, t.events):
            return


def f1_output(p: FairnessPlan, lone_itl_ms: float | None) -> int:
    """F1's output tokens: long enough that a request decodes F1_DECODE_TARGET_MS even alone
    (at the lone decode's ITL, `lone_itl_ms`), so neighbours share intervals the verdict can compare;
    at least the plan's, at most F1_OUTPUT_MAX and what the per-slot context leaves."""
    wanted = p.f1_output
    if lone_itl_ms:
        wanted = max(wanted, math.ceil(F1_DECODE_TARGET_MS / lone_itl_ms))
    room = (p.per_slot_ctx - 16 - p.prompt) if p.per_slot_ctx else wanted
    return max(2, min(wanted, max(F1_OUTPUT_MAX, p.f1_output), room))


async def equal_requests(t: CheckTraffic, output: int) -> None:
    """F1: the plan's streams of equal requests of `output` tokens, closed loop."""
    n = t.plan.f1_streams
    if n >= 2:
        per_stream = t.s.lane.fairness.f1_requests_per_stream
        await rounds(t, "F1", lambda rep: t.closed_loop("F1", n, per_stream, t.plan.prompt, output, rep))


async def mixed_sizes(t: CheckTraffic) -> None:
    """F2: each size alone (the references), then all sizes at once, biggest first."""
    sizes = t.plan.f2_sizes
    if len(sizes) < 2:
        return
    t.progress.level(t.lane, "fairness F2", len(sizes), 1)
    _, cap = t.s.lane.fairness.rounds("F2")
    tags = [f"alone{r}-" for r in range(REFERENCES)] + [f"together{r}-" for r in range(1, cap + 1)]
    built = {(tag, i): await t.req("F2", tag, i, *sizes[i]) for tag in tags for i in range(len(sizes))}
    # a prompt too short for its id grows to fit, by as much as the id is long: every request of a
    # size gets its longest prompt, so that a size alone and together is the same request
    longest = {i: max(r.prompt_tokens for (_, j), r in built.items() if j == i) for i in range(len(sizes))}
    for (tag, i), r in built.items():
        if r.prompt_tokens < longest[i]:
            built[tag, i] = await t.req("F2", tag, i, longest[i], sizes[i][1])
    async def alone(k: int) -> None:  # each size alone: its median is the reference
        for rep in range(k * REFERENCES, (k + 1) * REFERENCES):
            for i in range(len(sizes)):
                tag = f"alone{rep}-"
                req = built.get((tag, i)) or await t.req("F2", tag, i, longest[i], sizes[i][1])
                await t.send("F2", "alone_again" if k else "alone", i, req, level=len(sizes), rep=rep + 1)
    await references(t, "F2", REFERENCES * len(sizes), alone)

    async def together(rep: int) -> None:
        t.progress.level(t.lane, "fairness F2", len(sizes), rep)
        order = sorted(range(len(sizes)), key=lambda i: -(sizes[i][0] + sizes[i][1]))  # biggest first
        tasks = []
        for i in order:
            tasks.append(t.spawn(t.send("F2", "together", i, built[f"together{rep}-", i],
                                        level=len(sizes), rep=rep, stream=i)))
            await asyncio.sleep(SIZES_GAP_S)
        await asyncio.gather(*tasks)
    await rounds(t, "F2", together)


async def backlogged_clients(t: CheckTraffic, lone_e2e_s: float) -> None:
    """F3: clients start staggered over one request's duration (`lone_e2e_s`), as backlogged clients
    arrive in practice; equal requests started together would finish together forever, and the order
    in which a scheduler picks among waiters would never matter."""
    c = t.plan.f3_clients
    per_client = t.s.lane.fairness.f3_requests_per_client
    await rounds(t, "F3", lambda rep: t.closed_loop("F3", c, per_client, t.plan.prompt, t.plan.output, rep,
                                                    stagger_s=lone_e2e_s / c))


async def decode_stall(t: CheckTraffic) -> None:
    """S1: a prompt injected among steady decoders, against the same prompt alone."""
    p = t.plan
    if p.slots < 2:
        return
    t.progress.level(t.lane, "fairness S1", p.s1_decoders + 1, 1)
    for i in range(S1_REFERENCES):
        await t.send("S1", "solo", i, await t.req("S1", "solo", i, p.s1_prompt, 4))

    async def injection(rep: int) -> None:
        t.progress.level(t.lane, "fairness S1", p.s1_decoders + 1, rep)
        outs, tasks = await t.decoders("S1", p.s1_decoders, p.s1_decoder_output, rep)
        await wait_for_tokens(outs, WATCH_TOKENS)
        await t.send("S1", "injected", 0, await t.req("S1", f"injected{rep}-", 0, p.s1_prompt, 4),
                     level=p.s1_decoders + 1, rep=rep, stream=p.s1_decoders)
        await asyncio.gather(*tasks)
    await rounds(t, "S1", injection)


async def prompt_admission(t: CheckTraffic) -> None:
    """S2: short probes among steady decoders, against the probe alone."""
    p, probes = t.plan, t.s.lane.fairness.s2_probes
    if p.slots < 2:
        return
    t.progress.level(t.lane, "fairness S2", p.s2_decoders + 1, 1)
    short = max(8, min(32, p.prompt))
    for i in range(REFERENCES):
        await t.send("S2", "solo", i, await t.req("S2", "solo", i, short, 4))

    async def probing(rep: int) -> None:
        t.progress.level(t.lane, "fairness S2", p.s2_decoders + 1, rep)
        outs, tasks = await t.decoders("S2", p.s2_decoders, p.s2_decoder_output, rep)
        await wait_for_tokens(outs, WATCH_TOKENS)
        for i in range(probes):
            await t.send("S2", "probe", i, await t.req("S2", f"probe{rep}-", i, short, 4),
                         level=p.s2_decoders + 1, rep=rep, stream=p.s2_decoders)
            done = min(o.output_tokens for o in outs)
            await wait_for_tokens(outs, done + 3)  # let the decoders run a few iterations between probes
        await asyncio.gather(*tasks)
    await rounds(t, "S2", probing)


async def prompt_vs_prompt(t: CheckTraffic, prefill_tok_per_s: float | None) -> None:
    """S3: two long prompts PAIR_GAP_S apart, against a prompt alone (sized at the lane's prefill
    rate, `prefill_tok_per_s`)."""
    p = t.plan
    if p.slots < 2:
        return
    t.progress.level(t.lane, "fairness S3", 2, 1)
    prompt = s3_prompt_tokens(p, t.s.lane.fairness, prefill_tok_per_s)
    async def alone(k: int) -> None:  # the verdict knows how much a lone prefill varies by itself
        for i in range(k * REFERENCES, (k + 1) * REFERENCES):
            req = await t.req("S3", "solo", i, prompt, p.s3_output)
            await t.send("S3", "solo_again" if k else "solo", i, req)
    await references(t, "S3", REFERENCES, alone)

    async def pair(rep: int) -> None:
        first = await t.req("S3", f"first{rep}-", 0, prompt, p.s3_output)
        second = await t.req("S3", f"second{rep}-", 0, prompt, p.s3_output)
        t1 = t.spawn(t.send("S3", "first", 0, first, level=2, rep=rep, stream=0))
        await asyncio.sleep(PAIR_GAP_S)
        t2 = t.spawn(t.send("S3", "second", 1, second, level=2, rep=rep, stream=1))
        await asyncio.gather(t1, t2)
    await rounds(t, "S3", pair)
