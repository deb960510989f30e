"""A check whose workload did not create its situation, or whose client clock lagged the server,
is inconclusive: never a pass or a fail by accident (hand-made events with exact timestamps)."""

from satbench.analysis.checks import lane_verdicts
from satbench.analysis.fairness_checks import backlogged_clients, equal_requests, mixed_sizes
from satbench.analysis.guards import backlogged_share
from satbench.analysis.starvation_checks import decode_stall, prompt_admission, prompt_vs_prompt
from satbench.analysis.verdicts import Calibration, decode_rate
from satbench.config.schema import FairnessConfig, LaneConfig, ServerParams, WorkloadConfig
from satbench.workload.fairness_plan import make_plan
from tests.builders import MS, ev

LANE = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                  server=ServerParams(n_batch=256))
PLAN = make_plan(LANE, 4)
CAL = Calibration(prefill_tok_per_s=100_000.0, decode_iteration_ms=5.0)


def stat(v, name: str):
    """The verdict's statistic whose name starts with `name`."""
    return next(s for s in v.statistics if s.name.startswith(name))


def _tag(e, check: str, role: str, *, stream: int = 0, seq: int = 0, rep: int = 1, phase: str = "measured"):
    return e.model_copy(update={"check": check, "role": role, "stream": stream, "seq": seq, "repetition": rep,
                                "scenario": "fairness", "phase": phase})


# -- F1: rates are compared among requests decoding at the same time --------------------------

def _f1_rounds(itl_of_round) -> list:
    """4 streams in lockstep, a warmup round then 6 measured rounds of 64 tokens each."""
    events, t = [], 0.0
    for r in range(7):
        itl = itl_of_round(r)
        for s in range(4):
            chunks = [t + 2 + itl * k for k in range(64)]
            events.append(_tag(ev(stream=s, seq=r, sent_ms=t, chunks_ms=chunks), "F1", "equal",
                               stream=s, seq=r, phase="warmup" if r == 0 else "measured"))
        t += 2 + itl * 63
    return events


def test_a_host_wide_slowdown_of_one_round_is_not_unfairness():
    """Every stream of round 3 decodes 3× slower (the host stalled): the streams were treated
    alike, so F1 passes; comparing rates across rounds used to fail it (max/min 3)."""
    v = equal_requests(_f1_rounds(lambda r: 30.0 if r == 3 else 10.0), PLAN, CAL, FairnessConfig())
    assert v.verdict == "pass", (v.statistics, v.measured)
    assert stat(v, "service_ratio").estimate < 1.01
    assert v.measured["max_min_request_decode_rate"] > 2.9


def test_a_stream_served_at_half_rate_beside_the_others_is_unfair():
    """Stream 1 decodes at half the rate of the three beside it, request after request: its
    requests last twice as long, and F1 still fails it."""
    events = []
    for s in range(4):
        itl, t = (20.0 if s == 1 else 10.0), 0.0
        for j in range(7 if s == 1 else 14):
            events.append(_tag(ev(stream=s, seq=j, sent_ms=t, chunks_ms=[t + 2 + itl * k for k in range(64)]),
                               "F1", "equal", stream=s, seq=j, phase="warmup" if j == 0 else "measured"))
            t += 2 + itl * 63
    v = equal_requests(events, PLAN, CAL, FairnessConfig())
    assert v.verdict == "fail" and stat(v, "service_ratio").estimate > 1.9, v.statistics
    assert stat(v, "service_ratio").ci_low > 1.1


# -- F2: the N requests must share the server ------------------------------------------------

def _f2_events(overlap: bool) -> list:
    events = [_tag(ev(seq=i, sent_ms=1000 * rep + 100 * i,
                      chunks_ms=[1000 * rep + 100 * i + 10 * k for k in range(1, 5)]),
                   "F2", "alone", seq=i, rep=rep + 1) for rep in range(3) for i in range(4)]
    for rep in range(3):
        t = 5000 + 1000 * rep
        for i in range(4):
            sent = t + (1 * i if overlap else 50 * i)  # one after another: each ends before the next is sent
            events.append(_tag(ev(stream=i, seq=i, sent_ms=sent,
                                  chunks_ms=[sent + 10 * k for k in range(1, 5)]),
                               "F2", "together", stream=i, seq=i, rep=rep + 1))
    return events


def test_f2_requests_that_never_overlapped_are_inconclusive():
    v = mixed_sizes(_f2_events(overlap=False), PLAN, FairnessConfig())
    assert v.verdict == "inconclusive" and "in flight at once" in v.reason, v
    assert mixed_sizes(_f2_events(overlap=True), PLAN, FairnessConfig()).verdict == "pass"


# -- F3: backlogged clients, warmups not counted ---------------------------------------------

def _f3_events(duration_ms: float, stagger_ms: float, idle_ms: float = 0.0) -> list:
    """6 closed-loop clients (4 slots), each a warmup then 6 measured requests back to back."""
    events = []
    for c in range(6):
        t = stagger_ms * c
        for j in range(7):
            events.append(_tag(ev(stream=c, seq=j, sent_ms=t,
                                  chunks_ms=[t + duration_ms / 2, t + duration_ms]),
                               "F3", "client", stream=c, seq=j, phase="warmup" if j == 0 else "measured"))
            t += duration_ms + idle_ms
    return events


def test_f3_counts_no_warmup_so_no_client_is_credited_by_chance():
    """Client 0's warmup ends before the window opens (the last warmup is sent 45 ms in), the
    others' inside it: crediting those credited five clients by the chance of their timing.
    Warmups never count, so making them heavier changes nothing."""
    events = _f3_events(duration_ms=40, stagger_ms=9)
    heavy = [e.model_copy(update={"prompt_tokens": 1000}) if e.phase == "warmup" else e for e in events]
    v = backlogged_clients(events, PLAN, FairnessConfig())
    w = backlogged_clients(heavy, PLAN, FairnessConfig())
    weight = events[1].prompt_tokens + 2 * events[1].output_tokens
    assert v.verdict == w.verdict == "pass", (v, w)
    assert v.measured == w.measured and v.statistics == w.statistics
    # client 0 started 45 ms (more than one request) ahead: two requests ahead at most, no growth
    assert v.measured["max_service_gap_costliest"] == 2 and weight == max(
        e.prompt_tokens + 2 * e.output_tokens for e in events)


def test_f3_clients_that_did_not_stay_backlogged_are_inconclusive():
    events = _f3_events(duration_ms=40, stagger_ms=5, idle_ms=120)  # each client idles 3× its request
    v = backlogged_clients(events, PLAN, FairnessConfig())
    assert v.verdict == "inconclusive" and "backlogged" in v.reason, v
    assert backlogged_share(events, (0, int(300 * MS)), 4) < 0.8


# -- S1, S2, S3: client stamps that lag the server, unsteady references, no competition ---------

def _s1_events(solo_ttfts: list[float], solo_prompt_ms: list[float], injected_ttft: float) -> list:
    solos = [_tag(ev(seq=i, sent_ms=1000 * i, chunks_ms=[1000 * i + t, 1000 * i + t + 1], prompt_n=768,
                     prompt_ms=p), "S1", "solo", seq=i)
             for i, (t, p) in enumerate(zip(solo_ttfts, solo_prompt_ms))]
    out = solos
    for r in range(2):  # two injections, 0.2 ms apart in their prefill time
        t, ttft = 5000 + 2000 * r, injected_ttft + 0.2 * r
        out.append(_tag(ev(sent_ms=t, chunks_ms=[t + ttft, t + 1 + ttft], prompt_n=768), "S1", "injected",
                        stream=3, rep=r + 1))
        out += [_tag(ev(stream=d, sent_ms=t - 200, chunks_ms=[t - 190 + 10 * k for k in range(60)]), "S1",
                     "decoder", stream=d, rep=r + 1) for d in range(3)]
    return out


def test_s1_with_solo_ttfts_below_the_servers_own_prompt_time_is_inconclusive():
    """The client stamped its sends late (TTFT 50 ms where the server prefilled for 100 ms): the
    reference is impossible, and the check used to fail on it (200 ms > 1.25 × 50)."""
    v = decode_stall(_s1_events([50, 50, 50], [100, 100, 100], injected_ttft=200), PLAN, CAL,
                     FairnessConfig())
    assert v.verdict == "inconclusive" and "stamped its send late" in v.reason, v
    ok = decode_stall(_s1_events([110, 110, 110], [100, 100, 100], injected_ttft=120), PLAN, CAL,
                      FairnessConfig())
    assert ok.verdict == "pass", (ok.statistics, ok.reason)


def test_s1_with_a_hiccup_in_its_solo_references_is_inconclusive():
    """One solo took 900 ms (the host stalled), the others 100: a bound of 1.25 × 900 would pass
    anything; the median of steady references, or no verdict."""
    v = decode_stall(_s1_events([900, 100, 100], [890, 95, 95], injected_ttft=1000), PLAN, CAL,
                     FairnessConfig())
    assert v.verdict == "inconclusive" and "unsteady" in v.reason, v


def test_s2_leaves_out_probes_stamped_late():
    solos = [_tag(ev(seq=i, sent_ms=100 * i, chunks_ms=[100 * i + 10, 100 * i + 12], prompt_ms=8),
                  "S2", "solo", seq=i) for i in range(3)]
    decs = [_tag(ev(stream=d, sent_ms=990, chunks_ms=[1000 + 10 * k for k in range(201)]), "S2", "decoder",
                 stream=d, seq=d) for d in range(3)]
    # every probe's client TTFT (1 ms) is below the server's prompt time (8 ms): no probe can be timed
    probes = [_tag(ev(stream=3, seq=i, sent_ms=1100 + 300 * i, chunks_ms=[1101 + 300 * i, 1102 + 300 * i],
                      prompt_ms=8), "S2", "probe", stream=3, seq=i) for i in range(5)]
    v = prompt_admission(solos + decs + probes, PLAN, FairnessConfig())
    assert v.verdict == "inconclusive" and "stamped its send late" in v.reason, v


def _s3_events(first_ttft: float, gap: float, second_ttft: float, solo_prompt_ms: float | None = None,
               pairs: int = 3) -> list:
    """Two solos, then `pairs` pairs whose second TTFTs differ by 0.5 ms from pair to pair."""
    evs = [_tag(ev(seq=i, sent_ms=100 * i, chunks_ms=[100 * i + 5, 100 * i + 6], prompt_ms=solo_prompt_ms),
                "S3", "solo", seq=i) for i in range(2)]
    for k in range(pairs):
        t, t2 = 400 + 100 * k, second_ttft + 0.5 * k
        evs.append(_tag(ev(sent_ms=t, chunks_ms=[t + first_ttft, t + 1 + first_ttft]), "S3", "first",
                        rep=k + 1))
        evs.append(_tag(ev(sent_ms=t + gap, chunks_ms=[t + gap + t2, t + 1 + gap + t2]), "S3", "second",
                        stream=1, rep=k + 1))
    return evs


def test_s3_prompts_that_never_competed_are_inconclusive():
    """The first prompt's prefill (5 ms) ended before the second was sent (10 ms later)."""
    v = prompt_vs_prompt(_s3_events(first_ttft=5, gap=10, second_ttft=5), PLAN, CAL, FairnessConfig())
    assert v.verdict == "inconclusive" and "never competed" in v.reason, v
    together = _s3_events(first_ttft=20, gap=10, second_ttft=20)
    assert prompt_vs_prompt(together, PLAN, CAL, FairnessConfig()).verdict == "pass"


def test_s3_solos_stamped_late_are_inconclusive():
    v = prompt_vs_prompt(_s3_events(first_ttft=20, gap=10, second_ttft=20, solo_prompt_ms=30), PLAN, CAL,
                             FairnessConfig())
    assert v.verdict == "inconclusive" and "stamped its send late" in v.reason, v


# -- the plan and a lost server ----------------------------------------------------------------

def test_the_calibration_prompt_fits_the_per_slot_context():
    plan = make_plan(LaneConfig(), 4, per_slot_ctx=256)  # n_batch 2048: a 512-token calibration did not fit
    assert plan.calibration_prompt + plan.calibration_output <= 256 - 16


def test_checks_a_lost_server_kept_from_running_say_so():
    evs = _s3_events(first_ttft=20, gap=10, second_ttft=20)
    lost = "lane default: fairness F1 (4 in flight) failed: the server process exited"
    verdicts = {v.check: v for v in lane_verdicts(evs, PLAN, FairnessConfig(), True, lost=lost)}
    for c in ("F1", "F2", "F3", "S1", "S2"):
        assert verdicts[c].verdict == "inconclusive" and verdicts[c].reason == f"not run: {lost}"
    # judged, not "not run"
    assert verdicts["S3"].verdict == "inconclusive" and "calibration" in verdicts["S3"].reason


def test_f1_takes_the_decode_rate_from_the_servers_timings():
    """A client that read a stream late saw 65 tokens arrive within 16 ms; the server decoded
    them over 64 ms. The server's figure is the scheduler's doing, the bunching is not."""
    from satbench.analysis.verdicts import served_decode_rate
    from satbench.records.events import ServerTimings
    e = ev(sent_ms=0, chunks_ms=[50 + 0.25 * k for k in range(65)])
    assert decode_rate(e) == 64 / 0.016
    timed = e.model_copy(update={"timings": ServerTimings(predicted_n=65, predicted_ms=64.0)})
    assert served_decode_rate(timed) == 1000.0


def test_f1_passes_equal_shares_while_the_batch_narrows_and_widens():
    """Streams drift apart (each waits a few iterations before its next request), so a request
    decodes beside 1 to 3 others and its rate follows the batch width (iteration 6 + 2 ms per
    sequence): rates differ ×1.25 between requests, yet every sequence gets one token per
    iteration, and F1 passes. The same schedule with stream 2 skipped every other iteration fails."""
    def simulate(skip_stream: int | None) -> list:
        starts = {0: 0, 1: 7, 2: 19, 3: 31}  # iteration at which each stream's first request starts
        state = {s: {"seq": 0, "sent": None, "chunks": [], "left": 64, "wait": starts[s]} for s in range(4)}
        events, t, it = [], 0.0, 0
        while any(st["seq"] < 6 for st in state.values()) and it < 5000:
            active = [s for s, st in state.items() if st["wait"] <= 0 and st["seq"] < 6]
            t += 6.0 + 2.0 * len(active)
            for s, st in state.items():
                if st["seq"] >= 6:
                    continue
                if st["wait"] > 0:
                    st["wait"] -= 1
                    continue
                if st["sent"] is None:
                    st["sent"] = t
                    continue
                if s == skip_stream and it % 2:
                    continue
                st["chunks"].append(t)
                st["left"] -= 1
                if st["left"] == 0:
                    events.append(_tag(ev(stream=s, seq=st["seq"], sent_ms=st["sent"],
                                          chunks_ms=st["chunks"]), "F1", "equal", stream=s, seq=st["seq"],
                                       phase="warmup" if st["seq"] == 0 else "measured"))
                    st.update(seq=st["seq"] + 1, sent=None, chunks=[], left=64, wait=3 + s)
            it += 1
        return events

    fair = simulate(None)
    rates = [decode_rate(e) for e in fair if e.phase == "measured"]
    assert max(rates) / min(rates) > 1.2  # what per-request rates alone would call unfair (bound 1.10)
    v = equal_requests(fair, PLAN, CAL, FairnessConfig())
    assert stat(v, "service_ratio").estimate < 1.05 and v.measured["jain_index"] > 0.999, v.statistics
    skipped = equal_requests(simulate(skip_stream=2), PLAN, CAL, FairnessConfig())
    assert stat(skipped, "service_ratio").estimate > 1.5

def test_the_plan_uses_the_n_batch_llama_cpp_really_has():
    """llama.cpp lowers n_batch (2048) to a smaller whole context (4 slots × 256): S1's prompt
    '≫ n_batch' and its bound must use the n_batch the server runs with."""
    plan = make_plan(LaneConfig(), 4, per_slot_ctx=256)
    assert plan.n_batch == 1024
    unified = LaneConfig(server=ServerParams(kv_unified=True))
    assert make_plan(unified, 4, per_slot_ctx=512).n_batch == 512
    assert make_plan(LaneConfig(), 4, per_slot_ctx=8192).n_batch == 2048


def test_f1_survives_a_response_read_in_one_piece():
    """A whole response can arrive in one read (first token = end): it has no decode span to
    share. It used to divide by zero and leave the run without results.json."""
    from satbench.records.events import ServerTimings
    events = _f1_rounds(lambda r: 10.0)
    lone = next(e for e in events if e.seq == 3 and e.stream == 1)
    first = lone.chunks[0][0]
    one_read = lone.model_copy(update={"chunks": [(first, lone.output_tokens)], "end_ns": first,
                                       "timings": ServerTimings(predicted_n=64, predicted_ms=315.0)})
    events = [one_read if e is lone else e for e in events]
    assert equal_requests(events, PLAN, CAL, FairnessConfig()).verdict == "pass"


def _f1_closed(chunks_of, streams: int = 4, requests: int = 7) -> list:
    """Closed-loop F1 streams: chunks_of(stream, seq, sent_ms) -> [(ms, tokens)]; each stream
    sends its next request when it has read the last chunk."""
    events = []
    for s in range(streams):
        t = 0.0
        for j in range(requests):
            chunks = chunks_of(s, j, t)
            e = ev(stream=s, seq=j, sent_ms=t, chunks_ms=[c for c, _ in chunks])
            e = e.model_copy(update={"chunks": [(int(c * MS), n) for c, n in chunks],
                                     "output_tokens": sum(n for _, n in chunks)})
            events.append(_tag(e, "F1", "equal", stream=s, seq=j, phase="warmup" if j == 0 else "measured"))
            t = chunks[-1][0]
    return events


def _lockstep(it_ms: float = 10.0, tokens: int = 64):
    def chunks_of(s, j, t):
        start = (int((t + 2) / it_ms) + 1) * it_ms  # first token at the next iteration
        return [(start + it_ms * k + 0.05 * s, 1) for k in range(tokens)]
    return chunks_of


def test_f1_fails_a_stream_starved_while_its_neighbours_decode():
    """Each of stream 3's requests gets nothing for 330 ms after its first token, then the rest:
    a zero share is the clearest unfairness, not 'inconclusive'."""
    fair = _lockstep()

    def chunks_of(s, j, t):
        chunks = fair(s, j, t)
        if s == 3:
            chunks = chunks[:1] + [(c + 330.0, n) for c, n in chunks[1:]]
        return chunks
    v = equal_requests(_f1_closed(chunks_of), PLAN, CAL, FairnessConfig())
    assert v.verdict == "fail" and stat(v, "service_ratio").estimate > 1.3, (v.statistics, v.reason)
    assert equal_requests(_f1_closed(fair), PLAN, CAL, FairnessConfig()).verdict == "pass"


def test_f1_a_client_that_reads_a_streams_last_chunks_late_does_not_fail_a_fair_server():
    """Stream 3's client reads each request's last 5 tokens bunched, up to 20 ms late: the
    trimmed edges keep that from reading as a smaller share (it failed at 1.12 untrimmed)."""
    fair = _lockstep()
    for late in (0.5, 5.0, 20.0):
        def chunks_of(s, j, t, late=late):
            chunks = fair(s, j, t)
            return chunks if s != 3 else chunks[:59] + [(chunks[63][0] + late, 5)]
        v = equal_requests(_f1_closed(chunks_of), PLAN, CAL, FairnessConfig())
        assert v.verdict == "pass", (late, v.measured, v.reason)


def test_f1_does_not_pass_while_leaving_out_the_stream_the_scheduler_favours():
    """Stream 0 decodes 3× faster than the others: long enough requests fail it; requests so short
    that stream 0 is never compared give no verdict, not a pass on the other three."""
    def favoured(tokens):
        def chunks_of(s, j, t):
            it = 4.0 if s == 0 else 12.0
            return [(t + 2 + it * k, 1) for k in range(tokens)]
        return chunks_of
    assert equal_requests(_f1_closed(favoured(128)), PLAN, CAL, FairnessConfig()).verdict == "fail"
    short = equal_requests(_f1_closed(favoured(64)), PLAN, CAL, FairnessConfig())  # stream 0: 256 ms decodes
    assert short.verdict == "inconclusive", short
    assert "stream pair(s) [(0, 1), (0, 2), (0, 3)]" in short.reason, short


def test_f1_requests_are_sized_to_decode_long_enough_to_compare():
    """A fast server (2 ms a token alone) gets F1 requests of 350 tokens (700 ms), not the plan's
    64 (128 ms: never comparable); a slow one keeps the plan's; the per-slot context caps both."""
    from types import SimpleNamespace

    from satbench.run.fairness import FairnessRunner
    session = SimpleNamespace(lane=SimpleNamespace(name="default"))
    runner = FairnessRunner(session, PLAN, None, None, "t", None)
    runner.lone_itl_ms = 2.0
    assert runner.f1_output() == 350
    runner.lone_itl_ms = 40.0
    assert runner.f1_output() == PLAN.f1_output
    runner.plan = PLAN.model_copy(update={"per_slot_ctx": 256})
    runner.lone_itl_ms = 2.0
    assert runner.f1_output() == 256 - 16 - PLAN.prompt


def _with_prompt_ms(events, wait_ms: float) -> list:
    """The server's own prompt time: the TTFT less `wait_ms` spent before its prefill began."""
    from satbench.metrics.latency import ttft_ms
    from satbench.records.events import ServerTimings

    return [e.model_copy(update={"timings": ServerTimings(prompt_ms=max(0.0, ttft_ms(e) - wait_ms),
                                                          prompt_n=32, cache_n=0)}) for e in events]


def _one_late_first_token(delay_ms: float):
    """Streams 2 and 3 get every first token `delay_ms` late: half the TTFTs, so the upper quartile."""
    fair = _lockstep()

    def chunks_of(s, j, t):
        chunks = fair(s, j, t)
        return [(c + delay_ms, n) for c, n in chunks] if s in (2, 3) else chunks
    return chunks_of


def test_f1_a_ttft_over_the_bound_spent_prefilling_on_a_stalled_host_is_inconclusive():
    """One request's first token came 300 ms late, but by the server's own timings it waited 1 ms
    and spent the rest in its prefill (the host stalled the server's compute): that says nothing of
    the scheduler, so F1 is inconclusive, not failed, and says why."""
    events = _with_prompt_ms(_f1_closed(_one_late_first_token(300.0)), wait_ms=1.0)
    v = equal_requests(events, PLAN, CAL, FairnessConfig())
    assert v.verdict == "inconclusive", (v.verdict, v.statistics, v.reason)
    assert v.measured["max_ttft_ms"] > stat(v, "ttft").bound + 250
    assert "it did not make them wait" in v.reason and "waited at most 1.0 ms" in v.reason


def test_f1_a_ttft_over_the_bound_spent_waiting_still_fails():
    """The same late first token, but the server says its prefill took 1 ms: the request waited
    ~300 ms for it, which is the scheduler's doing."""
    events = [e.model_copy(update={"timings": e.timings.model_copy(update={"prompt_ms": 1.0})})
              for e in _with_prompt_ms(_f1_closed(_one_late_first_token(300.0)), wait_ms=1.0)]
    v = equal_requests(events, PLAN, CAL, FairnessConfig())
    assert v.verdict == "fail" and v.reason is None, (v.verdict, v.reason)
    assert v.measured["server_prefill_p50_ms"] == 1.0  # where the TTFT went, by the server's timings
    assert v.measured["wait_before_prefill_p50_ms"] > v.measured["server_prefill_p50_ms"]
    fair = equal_requests(_with_prompt_ms(_f1_closed(_lockstep()), wait_ms=1.0), PLAN, CAL, FairnessConfig())
    assert fair.verdict == "pass" and "wait_before_prefill_p50_ms" not in fair.measured


def test_f1_a_late_first_token_of_a_warmup_is_the_cold_start_not_the_scheduler():
    """Every warmup's first token 300 ms late (a batch shape the server had not run: 50 ms against 10
    on an H200) and every measured one on time: F1 passes, and its TTFT figures ignore the warmups."""
    fair = _lockstep()

    def cold_start(s, j, t):
        chunks = fair(s, j, t)
        return [(c + 300.0, n) for c, n in chunks] if j == 0 else chunks
    v = equal_requests(_f1_closed(cold_start), PLAN, CAL, FairnessConfig())
    assert v.verdict == "pass", (v.verdict, v.statistics, v.reason)
    assert v.measured["max_ttft_ms"] < 300.0


def test_f1_a_slow_prefill_split_over_batches_is_not_excused():
    """Four 32-token prompts over a 64-token batch: a prompt is split, and its later chunks could be
    starved while its prompt time runs, so a slow prefill there is judged, not excused."""
    small_batch = make_plan(LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                                       server=ServerParams(n_batch=64)), 4)
    events = _with_prompt_ms(_f1_closed(_one_late_first_token(300.0)), wait_ms=1.0)
    assert equal_requests(events, small_batch, CAL, FairnessConfig()).verdict == "fail"


def test_f1_records_that_are_not_its_closed_loop_are_refused_before_pairing():
    """A stream beyond the plan's, or one stream with two requests in flight, cannot come from F1's
    closed loop (hand-written or copied records); pairing them would cost in proportion to how many
    decode at once, so F1 says why it cannot judge them instead."""
    fair = _f1_closed(_lockstep())
    assert equal_requests(fair, PLAN, CAL, FairnessConfig()).verdict == "pass"
    stray = fair + [fair[-1].model_copy(update={"stream": PLAN.f1_streams})]
    v = equal_requests(stray, PLAN, CAL, FairnessConfig())
    assert v.verdict == "inconclusive" and f"outside the plan's {PLAN.f1_streams} streams" in v.reason
    twice = fair + [fair[3].model_copy(update={"seq": 99})]  # the same stream, the same time
    v = equal_requests(twice, PLAN, CAL, FairnessConfig())
    assert v.verdict == "inconclusive" and "two requests in flight at once" in v.reason, v.reason


def test_f3_records_of_more_clients_than_planned_are_refused():
    events = _f3_events(duration_ms=100.0, stagger_ms=5.0)
    extra = [e.model_copy(update={"stream": PLAN.f3_clients + e.stream}) for e in events]
    v = backlogged_clients(events + extra, PLAN, FairnessConfig())
    assert v.verdict == "inconclusive" and f"outside the plan's {PLAN.f3_clients} streams" in v.reason
