"""SLO attainment and goodput (docs/definitions.md#slo-attainment-and-goodput): the share of a level's
requests that met the lane's SLO."""

from __future__ import annotations

from collections.abc import Sequence

from satbench.config.schema import SloConfig
from satbench.metrics import latency
from satbench.records.events import RequestEvent


def slo_met(requests: Sequence[RequestEvent], slo: SloConfig) -> int:
    """Successful requests with TTFT ≤ the SLO's TTFT target, TPOT ≤ its TPOT target and, when it
    sets one, E2E ≤ its E2E target."""
    ok = 0
    for e in requests:
        ttft, tpot = latency.ttft_ms(e), latency.tpot_ms(e)
        if (ttft is not None and ttft <= slo.p95_ttft_ms and (tpot is None or tpot <= slo.p95_tpot_ms)
                and (slo.p95_e2e_ms is None or latency.e2e_ms(e) <= slo.p95_e2e_ms)):
            ok += 1
    return ok


def slo_attainment(met: int, ok_in_window: int, failed_in_window: int) -> float:
    """Attainment = requests meeting the SLO ÷ (successful + failed measured requests ending in the
    window): a failed request never met the SLO."""
    return met / (ok_in_window + failed_in_window)


def goodput_req_per_s(req_per_s: float, met: int, ok_in_window: int) -> float:
    """Goodput = req/s of successful requests × the share of them meeting the SLO (req/s meeting it)."""
    return req_per_s * met / ok_in_window if ok_in_window else 0.0
