"""Capability of a --url lane is refused when the server it names is not the one measured in a
way /props can tell (fewer or more slots, another per-slot context), and when the recommendation
was measured through a remote URL from another machine (its hardware fingerprint is then the
measuring machine's, not the server's)."""

import json

import pytest

from satbench.cli.main import main


def sweep(fake, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, "--concurrency", "1,2", "--repetitions", "1",
                 "--requests-per-level", "6", "--prompt-tokens", "16", "--output-tokens", "4",
                 "-o", str(run)]) == 0
    capsys.readouterr()
    return run / "recommendations.json"


def capability(recs, url, capsys, fmt="json") -> str:
    assert main(["capability", "--recommendations", str(recs), "--url", url, "--format", fmt]) == 0
    return capsys.readouterr().out


# a 10 ms iteration: two slots then clearly double one's throughput (the knee is 2); at 1 ms the
# client's own per-request time under load can hide that gain
SLOW = 10.0


def test_a_server_restarted_with_fewer_slots_is_not_advertised_at_the_measured_number(fake_server, tmp_path,
                                                                                       capsys):
    recs = sweep(fake_server(n_slots=2, decode_iteration_ms=SLOW), tmp_path, capsys)
    assert json.loads(recs.read_text())["lanes"][0]["recommended_concurrency"] == 2
    now = fake_server(n_slots=1, decode_iteration_ms=1.0)  # same model file and build, one slot
    out = capability(recs, now.base_url, capsys, "litellm")
    assert "max_parallel_requests: 1" in out and "satbench_status: unmeasured" in out
    (lane,) = json.loads(capability(recs, now.base_url, capsys))["lanes"]
    assert lane["status"] == "unmeasured"
    assert "measured with 2 slots, the server reports 1 now" in lane["reason"]


def test_a_server_restarted_with_another_per_slot_context_is_refused(fake_server, tmp_path, capsys):
    recs = sweep(fake_server(n_slots=2, n_ctx=2048, decode_iteration_ms=1.0), tmp_path, capsys)
    now = fake_server(n_slots=2, n_ctx=1024, decode_iteration_ms=1.0)
    (lane,) = json.loads(capability(recs, now.base_url, capsys))["lanes"]
    assert lane["status"] == "unmeasured"
    assert "measured with 1024 per-slot context, the server reports 512 now" in lane["reason"]


def test_the_same_shape_is_still_advertised(fake_server, tmp_path, capsys):
    recs = sweep(fake_server(n_slots=2, decode_iteration_ms=SLOW), tmp_path, capsys)
    now = fake_server(n_slots=2, decode_iteration_ms=SLOW)  # restarted as it was
    (lane,) = json.loads(capability(recs, now.base_url, capsys))["lanes"]
    assert lane["status"] == "measured" and lane["max_concurrency"] == 2, lane["reason"]


def as_measured_from(recs, url: str, on_measuring_machine: bool | None = None) -> None:
    """Rewrite the recommendation as if its run had reached the server through `url`; with
    `on_measuring_machine` None, as a satbench that did not record where the server was."""
    data = json.loads(recs.read_text())
    data["lanes"][0]["runtime"]["base_url"] = url
    data["lanes"][0]["server_on_measuring_machine"] = on_measuring_machine
    recs.write_text(json.dumps(data))


def test_a_lane_measured_through_a_remote_url_is_not_vouched_for_by_the_measuring_machine(
        fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    recs = sweep(fake, tmp_path, capsys)
    # TEST-NET-1, not held here (the default: from before the sweep recorded where its server was)
    as_measured_from(recs, "http://192.0.2.7:8080")
    (lane,) = json.loads(capability(recs, fake.base_url, capsys))["lanes"]
    assert lane["status"] == "unmeasured" and lane["max_concurrency"] == 1
    assert lane["reason"].startswith("measured through a remote URL (http://192.0.2.7:8080) "
                                     "from another machine: the server's hardware was not seen")


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]"])
def test_a_lane_measured_through_loopback_is_still_advertised(fake_server, tmp_path, capsys, host):
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    recs = sweep(fake, tmp_path, capsys)
    as_measured_from(recs, f"http://{host}:8080")
    (lane,) = json.loads(capability(recs, fake.base_url, capsys))["lanes"]
    assert lane["status"] == "measured", lane["reason"]


def this_machines_address(monkeypatch) -> str:
    """A non-loopback IPv4 address this machine's interfaces hold (psutil's list, as served_here reads
    it); on a machine with none, a documentation address added to that list, so the rule is still
    exercised rather than skipped."""
    from satbench.server import remote

    real = sorted(a for a in remote.interface_addresses() if ":" not in a and not a.startswith("127."))
    if real:
        return real[0]
    monkeypatch.setattr(remote, "interface_addresses", lambda: {"127.0.0.1", "::1", "198.51.100.9"})
    return "198.51.100.9"


def test_a_url_naming_this_machine_is_served_here_and_another_is_not(monkeypatch):
    from satbench.server.remote import served_here

    assert served_here(f"http://{this_machines_address(monkeypatch)}:8080")
    assert served_here("http://127.0.0.1:1") and served_here("http://localhost:1")
    assert not served_here("http://192.0.2.7:8080")
    assert not served_here("http://no-such-host.invalid:8080")


def test_the_sweep_records_that_its_server_was_on_the_measuring_machine(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    recs = sweep(fake, tmp_path, capsys)
    assert json.loads(recs.read_text())["lanes"][0]["server_on_measuring_machine"] is True


def test_a_lane_measured_from_another_machine_is_refused_even_on_the_node_that_serves_it(
        fake_server, tmp_path, capsys, monkeypatch):
    """Machine A measured node B through B's address: on B that address is served here, yet the
    hardware recorded is A's. The sweep recorded the server as not on its machine: refused."""
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    recs = sweep(fake, tmp_path, capsys)
    as_measured_from(recs, f"http://{this_machines_address(monkeypatch)}:8080", on_measuring_machine=False)
    (lane,) = json.loads(capability(recs, fake.base_url, capsys))["lanes"]
    assert lane["status"] == "unmeasured" and lane["reason"].startswith("measured through a remote URL")
    as_measured_from(recs, f"http://{this_machines_address(monkeypatch)}:8080", on_measuring_machine=True)
    (lane,) = json.loads(capability(recs, fake.base_url, capsys))["lanes"]
    assert lane["status"] == "measured", lane["reason"]


def test_a_recommendation_with_an_slo_derived_before_1_7_is_not_advertised():
    """Before 1.7 a p95 too few samples could bound met its SLO target by its largest sample: a lane
    with an SLO from such a file may be advertised above what its SLO allows."""
    from satbench.capability.checks import slo_derived_too_early
    from satbench.config.schema import SloConfig
    from satbench.saturation.recommendations_file import LaneRecommendation, RecommendationsFile

    with_slo = LaneRecommendation.model_construct(slo=SloConfig(p95_ttft_ms=500, p95_tpot_ms=50))
    without = LaneRecommendation.model_construct(slo=None)
    old, new = (RecommendationsFile.model_construct(schema_version=v) for v in ("1.6", "1.7"))
    why = slo_derived_too_early(old, with_slo)
    assert why is not None and "run `satbench recommend` on its run directory again" in why
    assert slo_derived_too_early(old, without) is None and slo_derived_too_early(new, with_slo) is None


def test_served_here_asks_the_interfaces_not_a_test_bind(monkeypatch):
    """A host that allows non-local binds (a VIP host: ip_nonlocal_bind=1) binds any address, so a
    test bind called every server 'here'; the interfaces' own addresses decide."""
    from satbench.server import remote

    assert not remote.served_here("http://192.0.2.7:8080")
    monkeypatch.setattr(remote, "interface_addresses", lambda: {"192.0.2.7"})
    assert remote.served_here("http://192.0.2.7:8080")


def test_capability_refuses_an_slo_lane_from_a_1_6_file_after_its_other_checks(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    recs = sweep(fake, tmp_path, capsys)
    data = json.loads(recs.read_text())
    data["schema_version"] = "1.6"
    data["lanes"][0]["slo"] = {"p95_ttft_ms": 1e6, "p95_tpot_ms": 1e6, "p95_e2e_ms": None}
    recs.write_text(json.dumps(data))
    (lane,) = json.loads(capability(recs, fake.base_url, capsys))["lanes"]
    assert lane["status"] == "unmeasured"
    assert lane["reason"].startswith("recommendations schema 1.6 with an SLO")
    now = fake_server(n_slots=1, decode_iteration_ms=1.0)  # also another shape: that reason comes first
    (lane,) = json.loads(capability(recs, now.base_url, capsys))["lanes"]
    assert lane["reason"].startswith("measured with 2 slots"), lane["reason"]


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "[::ffff:127.0.0.1]"])
def test_addresses_that_reach_this_machine_are_served_here(host):
    """llama-server prints 'listening on http://0.0.0.0:PORT'; that, '::' and IPv4-mapped loopback all
    connect here, though no interface lists them."""
    from satbench.server.remote import served_here

    assert served_here(f"http://{host}:8080")
    assert not served_here("http://[::ffff:192.0.2.7]:8080")
