"""`satbench completion`: scripts generated from the parser name every subcommand and its flags."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from satbench.cli.args import build_parser
from satbench.cli.completion import commands
from satbench.cli.main import main


def _script(shell: str, capsys) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def test_the_bash_script_names_every_subcommand_and_their_flags(capsys):
    text = _script("bash", capsys)
    top = build_parser()._subparsers._group_actions[0].choices
    for name in [*top, "models make", "fleet run", "fleet merge"]:
        assert f'"{name}") opts="' in text, name
    sweep = _opts(text, "sweep")
    assert {"--lanes", "--resume", "--concurrency", "-np", "--json", "--quiet"} <= sweep
    capability = _opts(text, "capability")
    assert "--recommendations" in capability and "--resume" not in capability


def _opts(text: str, name: str) -> set[str]:
    line = next(line for line in text.splitlines() if line.strip().startswith(f'"{name}")'))
    return set(line.split('opts="', 1)[1].split('"', 1)[0].split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_a_subcommands_flags(capsys):
    text = _script("bash", capsys)
    probe = text + 'COMP_WORDS=(satbench models make --ar); COMP_CWORD=3; _satbench; echo "${COMPREPLY[@]}"\n'
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == ["--arch"]


def test_fish_and_zsh_scripts_cover_every_command(capsys):
    fish, zsh = _script("fish", capsys), _script("zsh", capsys)
    assert "bashcompinit" in zsh
    for cmd in commands(build_parser()):
        if cmd.path:
            assert f"-a {cmd.path[-1]} " in fish, cmd.path
