"""What every command pays before it runs: the parser's imports, and the API's that `analyze`,
`recommend` and `report` go through. Reading a run directory or printing --help must not import the
HTTP stack (aiohttp is ~0.1 s of CPU on this 2-core box); only a command that talks to a server
loads it."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_and_the_api_do_not_import_the_http_stack():
    code = ("import sys; import satbench.cli.main, satbench.api; "
            "print(sorted(m for m in ('aiohttp', 'satbench.http.client', 'satbench.server.checks') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
