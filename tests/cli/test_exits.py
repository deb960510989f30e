"""The exit codes are one table (cli.exits): the README lists it, every --help ends with it, and the
errors return its codes."""

from __future__ import annotations

import re
from pathlib import Path

from satbench import errors
from satbench.cli import exits
from satbench.cli.args import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readmes_list_is_the_codes_table():
    text = README.read_text()
    found = re.search(r"<!-- exit-codes -->\n(.*?)\n<!-- /exit-codes -->", text, re.S)
    assert found is not None, "README.md has no exit-codes list"
    assert found.group(1) == exits.readme_list()


def test_the_errors_exit_with_the_tables_codes():
    assert errors.UserError.exit_code == exits.USAGE
    assert errors.RuntimeStartError.exit_code == exits.SERVER_START
    assert errors.ServerGoneError.exit_code == exits.SERVER_GONE
    assert errors.RunDirError.exit_code == exits.RUN_DIR
    assert errors.Interrupted.exit_code == exits.INTERRUPTED
    codes = [e.code for e in exits.EXIT_CODES]
    assert len(set(codes)) == len(codes)


def test_every_commands_help_ends_with_the_exit_codes():
    parser = build_parser()
    assert parser.format_help().rstrip().endswith(exits.help_epilog())
    for sub in parser._subparsers._group_actions[0].choices.values():
        assert sub.format_help().rstrip().endswith(exits.help_epilog()), sub.prog
