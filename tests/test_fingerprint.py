"""The hardware fingerprint: stable for the same machine, different for another one."""

from satbench.hardware import describe_host
from satbench.manifest import GpuInfo, HostInfo


def host(**kw):
    base = dict(cpu_model="AMD EPYC", cores_logical=2, cores_physical=2, ram_bytes=24 * 2**30,
                os="Linux 6.1", python="3.11.7")
    base.update(kw)
    return HostInfo(**base)


def test_same_machine_same_hash_and_python_does_not_count():
    assert host().fingerprint() == host(python="3.12.1").fingerprint()
    assert host().fingerprint() == host(ram_bytes=24 * 2**30 - 50 * 2**20).fingerprint()  # kernel reserve


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
