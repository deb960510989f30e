"""`satbench completion bash|zsh|fish`: a shell completion script generated from the parser itself
(every subcommand, each one's flags and a positional's choices), so it never lags the flags."""

from __future__ import annotations

import argparse
from typing import NamedTuple

SHELLS = ("bash", "zsh", "fish")


class Command(NamedTuple):
    path: tuple[str, ...]  # () for satbench itself, ("models", "make") for a nested one
    help: str
    flags: tuple[tuple[str, str], ...]  # (option string, help)
    words: tuple[str, ...]  # subcommand names and a positional's choices


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = (), text: str = "") -> list[Command]:
    """Every parser in the tree, depth first, with its flags and the words that may follow it."""
    flags: list[tuple[str, str]] = []
    words: list[str] = []
    below: list[Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                words.append(name)
                below += commands(sub, (*path, name), helps.get(name, ""))
        elif action.option_strings:
            flags += [(opt, action.help or "") for opt in action.option_strings]
        elif action.choices:
            words += [str(c) for c in action.choices]
    return [Command(path, text, tuple(flags), tuple(words)), *below]


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](commands(parser))


def _bash(cmds: list[Command]) -> str:
    paths = [" ".join(c.path) for c in cmds if c.path]
    words = {c.path: " ".join([*(f for f, _ in c.flags), *c.words]) for c in cmds}
    cases = "\n".join(f'        "{" ".join(path)}") opts="{text}" ;;' for path, text in words.items())
    known = "|".join(f'"{p}"' for p in paths)
    return f"""# satbench completion for bash: eval "$(satbench completion bash)"
_satbench() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" key="" next i opts
    for ((i = 1; i < COMP_CWORD; i++)); do
        next="${{key:+$key }}${{COMP_WORDS[i]}}"
        case "$next" in
            {known}) key="$next" ;;
        esac
    done
    case "$key" in
{cases}
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -o default -F _satbench satbench
"""


def _zsh(cmds: list[Command]) -> str:
    return ("# satbench completion for zsh: eval \"$(satbench completion zsh)\" (bash's, through "
            "bashcompinit)\nautoload -U +X bashcompinit && bashcompinit\n" + _bash(cmds).split("\n", 1)[1])


def _fish_text(text: str) -> str:
    short = " ".join(text.split())
    short = short if len(short) <= 70 else short[:67] + "..."
    return "'" + short.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish(cmds: list[Command]) -> str:
    lines = ["# satbench completion for fish: satbench completion fish | source"]
    subs = {c.path: [d for d in cmds if d.path[:-1] == c.path and d.path] for c in cmds}
    for c in cmds:
        if c.path:
            parent = c.path[:-1]
            siblings = " ".join(d.path[-1] for d in subs[parent])
            when = ("__fish_use_subcommand" if not parent else f"__fish_seen_subcommand_from {parent[-1]}; "
                    f"and not __fish_seen_subcommand_from {siblings}")
            lines.append(f"complete -c satbench -f -n '{when}' -a {c.path[-1]} -d {_fish_text(c.help)}")
        when = "__fish_use_subcommand" if not c.path else f"__fish_seen_subcommand_from {c.path[-1]}"
        for flag, text in c.flags:
            kind = "-l" if flag.startswith("--") else ("-s" if len(flag) == 2 else "-o")
            lines.append(f"complete -c satbench -n '{when}' {kind} {flag.lstrip('-')} -d {_fish_text(text)}")
        children = {d.path[-1] for d in subs[c.path]}
        choices = [w for w in c.words if w not in children]
        if choices:
            lines.append(f"complete -c satbench -f -n '{when}' -a '{' '.join(choices)}'")
    return "\n".join(lines) + "\n"


def cmd_completion(a: argparse.Namespace) -> int:
    from satbench.cli.args import build_parser

    print(script(build_parser(), a.shell), end="")
    return 0
