"""The hardware fingerprint: stable for the same machine, different for another one."""

from satbench.host.hardware import describe_host
from satbench.records.manifest import GpuInfo, HostInfo


def host(**kw):
    base = dict(cpu_model="AMD EPYC", cores_logical=2, cores_physical=2, ram_bytes=24 * 2**30,
                os="Linux 6.1", python="3.11.7")
    base.update(kw)
    return HostInfo(**base)


def test_same_machine_same_hash_and_python_does_not_count():
    assert host().fingerprint() == host(python="3.12.1").fingerprint()
    assert host().fingerprint() == host(ram_bytes=24 * 2**30 - 50 * 2**20).fingerprint()  # kernel reserve


def test_a_kernel_that_reserves_a_little_more_memory_or_a_kernel_update_is_the_same_machine():
    """This very machine: 23.54 GiB visible of 24 installed. Rounding to the nearest GiB flipped
    to 23 when the kernel kept 50 MiB more; the 4 GiB class does not. A kernel patch release is
    not another machine either."""
    seen = 25_276_510_208
    assert host(ram_bytes=seen).fingerprint() == host(ram_bytes=seen - 50 * 2**20).fingerprint()
    assert host(ram_bytes=seen).fingerprint() == host(ram_bytes=seen - 2 * 2**30).fingerprint()
    # 28 GiB class
    assert host(ram_bytes=seen).fingerprint() != host(ram_bytes=seen + 2 * 2**30).fingerprint()
    assert host(os="Linux 6.18.44-fc").fingerprint() == host(os="Linux 6.18.45-fc").fingerprint()
    assert host(os="Linux 6.1").fingerprint() != host(os="Darwin 24.1").fingerprint()


def test_usable_cores_and_the_cpu_generation_count():
    """Two cores of a 64-core host (taskset, or a container's --cpus) are not that host; a VM
    that shows a bare "AMD EPYC" is told apart from another EPYC generation by its signature."""
    from satbench.host.hardware import usable_cores

    assert host(cores_usable=2).fingerprint() != host(cores_usable=1).fingerprint()
    assert usable_cores(64, affinity={0, 1}) == 2
    assert usable_cores(64, affinity=set(range(64)), quota=1.5) == 2
    assert usable_cores(2, affinity={0, 1}, quota=None) == 2
    assert host(cpu_signature="family 26 model 2 stepping 1").fingerprint() != host(
        cpu_signature="family 25 model 17 stepping 1").fingerprint()


def test_usable_cores_follow_this_process_affinity():
    import os

    from satbench.host.hardware import describe_host as describe

    full = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(full)})
        one = describe(None)
    finally:
        os.sched_setaffinity(0, full)
    again = describe(None)
    assert one.cores_usable == 1 and 1 <= again.cores_usable <= len(full)
    assert (one.fingerprint_sha256 == again.fingerprint_sha256) == (again.cores_usable == 1)


def test_other_hardware_other_hash():
    base = host().fingerprint()
    assert host(cores_logical=4).fingerprint() != base
    assert host(cpu_model="Intel Xeon").fingerprint() != base
    h200 = GpuInfo(name="NVIDIA H200", memory_total_bytes=141 * 2**30, driver="580.95", cuda="13.0")
    with_gpu = host(gpus=[h200]).fingerprint()
    assert with_gpu != base
    assert host(gpus=[h200.model_copy(update={"driver": "575.1"})]).fingerprint() != with_gpu


def test_this_machine_is_stable_across_calls():
    a, b = describe_host(None), describe_host(None)
    assert a.fingerprint_sha256 == b.fingerprint_sha256 == a.fingerprint() and len(a.fingerprint_sha256) == 64


def test_a_record_by_an_earlier_satbench_is_recognised_as_this_machine():
    """An earlier satbench recorded neither the CPU signature nor the usable cores, and hashed
    another identity: resume, compare and capability must say so, not call it another machine."""
    now = host(cpu_signature="family 26 model 2 stepping 1", cores_usable=2)
    earlier = host()  # no cpu_signature, no cores_usable
    assert earlier.older_scheme_of(now)
    assert not host(cores_logical=4).older_scheme_of(now)
    assert not now.older_scheme_of(now.model_copy(update={"cores_logical": 4}))  # recorded by this scheme
