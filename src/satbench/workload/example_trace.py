"""The example trace satbench ships (data/example-trace.jsonl): synthetic, written by this generator
from a seed, not recorded traffic. `python -m satbench.workload.example_trace` writes it again, byte
for byte (a test compares them).

Its shape: EXAMPLE_REQUESTS requests arriving as a Poisson process of about EXAMPLE_SPAN_S seconds.
Each starts a conversation under one of SYSTEM_PROMPTS shared system prompts (whole blocks of
BLOCK_TOKENS, the same hash_ids for every conversation that uses it), or continues an open one: its
prompt is the previous turn's prompt (its whole blocks: their hash_ids again), that turn's answer and
a new user message. A conversation has at most MAX_TURNS turns. Each block not shared gets a new hash
id, so equal hash_ids always mean an equal prefix. The first line carries one more key, "synthetic",
saying so (Mooncake readers, satbench's too, ignore keys they do not know).
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from satbench.workload.trace_file import BLOCK_TOKENS

EXAMPLE_SEED = 34
EXAMPLE_REQUESTS = 200
EXAMPLE_SPAN_S = 60.0
SYSTEM_PROMPTS = (1, 2, 3)  # the shared system prompts' lengths, in blocks
MAX_TURNS = 4
CONTINUE_SHARE = 0.5  # the chance a request continues an open conversation (when one is open)
MESSAGE_TOKENS = (64, 640)  # a new user message: uniform, tokens
ANSWER_TOKENS = (16, 256)  # output_length: uniform, tokens
EXAMPLE_PATH = Path(__file__).parent / "data" / "example-trace.jsonl"
SYNTHETIC = ("satbench's example trace, written by satbench.workload.example_trace (seed {seed}): "
             "not recorded traffic")


@dataclass
class _Conversation:
    input_tokens: int  # its last turn's prompt
    output_tokens: int  # its last turn's answer
    hash_ids: list[int]
    turns: int = 1


@dataclass
class _Ids:
    """New hash ids, counting from 0; the system prompts' blocks first."""

    next_id: int = 0
    system: list[list[int]] = field(default_factory=list)

    def new(self, n: int) -> list[int]:
        out = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return out


def example_lines(seed: int = EXAMPLE_SEED, requests: int = EXAMPLE_REQUESTS,
                  span_s: float = EXAMPLE_SPAN_S) -> list[dict]:
    """The example trace's records, as JSON objects in file order (module docstring); the same
    arguments give the same records."""
    rng = random.Random(seed)
    ids = _Ids()
    ids.system = [ids.new(n) for n in SYSTEM_PROMPTS]
    open_talks: list[_Conversation] = []
    t_ms, out = 0.0, []
    for i in range(requests):
        if i:
            t_ms += rng.expovariate(requests / span_s) * 1000
        message = rng.randint(*MESSAGE_TOKENS)
        answer = rng.randint(*ANSWER_TOKENS)
        if open_talks and rng.random() < CONTINUE_SHARE:
            talk = open_talks[rng.randrange(len(open_talks))]
            shared = talk.hash_ids[:talk.input_tokens // BLOCK_TOKENS]
            n_in = talk.input_tokens + talk.output_tokens + message
            talk.turns += 1
            if talk.turns >= MAX_TURNS:
                open_talks.remove(talk)
        else:
            system = ids.system[rng.randrange(len(ids.system))]
            shared, n_in = system, len(system) * BLOCK_TOKENS + message
            talk = _Conversation(0, 0, [])
            open_talks.append(talk)
        hash_ids = shared + ids.new(-(-n_in // BLOCK_TOKENS) - len(shared))
        talk.input_tokens, talk.output_tokens, talk.hash_ids = n_in, answer, hash_ids
        out.append({"timestamp": round(t_ms), "input_length": n_in, "output_length": answer,
                    "hash_ids": hash_ids})
    out[0]["synthetic"] = SYNTHETIC.format(seed=seed)
    return out


def example_text(seed: int = EXAMPLE_SEED) -> str:
    """The example trace file's text: one compact JSON object a line."""
    return "".join(json.dumps(line, separators=(", ", ": ")) + "\n" for line in example_lines(seed))


def main(argv: list[str] | None = None) -> int:
    """Write the example trace to EXAMPLE_PATH (or the path given)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else EXAMPLE_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(example_text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
