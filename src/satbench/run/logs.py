"""Where a sweep's servers write their logs, in the run directory.

One rule names every log file: ``server-LANE[-SCENARIO][-resumeS][-restartR].log``, where the
scenario is left out for solo, the session for the first one (0) and the restart count for the
first start (0); a one-lane run's first solo server writes plain ``server.log``. The memory probe
(llama.cpp at log verbosity 4) is the scenario ``memory``.
"""

from __future__ import annotations

from pathlib import Path


def server_log_path(run_dir: Path, lane: str, one_lane: bool, scenario: str, session: int = 0,
                    restart: int = 0) -> Path:
    """The log file of lane `lane`'s server for `scenario` in session `session`, after `restart`
    restarts; `one_lane`: the run has a single lane."""
    suffix = (("" if scenario == "solo" else f"-{scenario}") + (f"-resume{session}" if session else "")
              + (f"-restart{restart}" if restart else ""))
    name = "server.log" if one_lane and not suffix else f"server-{lane}{suffix}.log"
    return run_dir / name
