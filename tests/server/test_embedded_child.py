"""The embedded server's child process dies with satbench, even while it is still loading."""

import sys

import pytest

from tests.server.orphans import outlives_its_parent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_the_embedded_child_is_killed_by_the_kernel_when_satbench_dies(tmp_path):
    """Its stdin watch (EOF when satbench dies) starts only after the model has loaded: a 14 GB
    model loading for a minute would outlive a SIGKILLed satbench without the kernel's help."""
    script = (f"import sys, time, subprocess\n"
              f"from pathlib import Path\n"
              f"from satbench.config.schema import ServerParams\n"
              f"from satbench.server.embedded import EmbeddedRuntime\n"
              f"rt = EmbeddedRuntime('/m.gguf', ServerParams(), 1, 256, Path({str(tmp_path / 's.log')!r}))\n"
              f"real = subprocess.Popen\n"
              f"# the child's stand-in: a process that never reads stdin, like a child still loading\n"
              f"subprocess.Popen = lambda argv, **kw: "
              f"real([sys.executable, '-c', 'import time; time.sleep(120)'], **kw)\n"
              f"rt._launch(); print(rt.pid, flush=True); time.sleep(120)\n")
    assert outlives_its_parent(script) is None, \
        "the embedded child outlived the satbench process that started it"
