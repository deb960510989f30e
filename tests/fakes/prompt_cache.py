"""The fake's prompt cache, as llama.cpp's server keeps one per slot, and its chat template.

* Each slot remembers the token sequence it last held: the prompt tokens it processed and the tokens
  it generated, except the last one (llama.cpp samples it and never decodes it). A request with
  ``cache_prompt`` true (llama.cpp's default) reuses the longest common prefix of its prompt and its
  slot's sequence: ``cache_n = min(prefix, prompt tokens − 1)`` (llama.cpp re-evaluates at least one
  token, for its logits); only the other ``prompt tokens − cache_n`` are prefilled (``prompt_n``).
  With ``cache_prompt`` false, ``cache_n`` is 0. Either way the slot then holds the new sequence.
* Slot choice (llama.cpp's ``get_available_slot``, ``--slot-prompt-similarity`` s, default
  `LLAMACPP_SLOT_PROMPT_SIMILARITY`): among idle slots, the one whose sequence shares the largest
  fraction ``common prefix ÷ prompt tokens`` of the new prompt, when that fraction is above s (the
  lowest index on a tie); else the least recently released idle slot (never-used slots first; on a
  tie the highest index, as llama.cpp's ``<=`` comparison picks). s = 0 skips the similarity pass.
* Host-memory prompt cache (llama-server ``--cache-ram``, on by default there; here `ram_tokens`,
  off by default): when a request takes a slot that holds tokens, by LRU (or by the lowest-idle rule)
  or by similarity keeping under half of them (``f_keep < 0.5``), the slot's sequence is saved in
  host memory first (unless a saved one already contains it; saved ones it contains are dropped),
  then the saved sequence that best serves the prompt is restored into the slot and leaves the host
  cache: the one with the largest common prefix that beats the slot's own on both ``prefix ÷ saved
  length`` (at least 0.25) and ``prefix ÷ prompt length``. Beyond `ram_tokens` tokens in all, the
  oldest saved sequences go (one always stays). A restore costs no time here.
* Chat (`chat_template`): the fake's template is ChatML-like text, ``<|im_start|> ROLE CONTENT
  <|im_end|>`` per message then ``<|im_start|> assistant``; the fake's tokenizer (one token per
  word) makes it CHAT_MESSAGE_TOKENS per message plus CHAT_REPLY_TOKENS, so turn k + 1 of a
  conversation starts with turn k's prompt, token for token. Generated tokens are remembered as the
  tokenizer reads their text back (`retokenized`), so a history that resends an answer verbatim
  also shares the answer's tokens.

A request without known prompt tokens (scripted_time.Sim's) never hits the cache and leaves its slot
holding nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

try:
    from .fake_script import VOCAB, tokenize
except ImportError:  # run as a script (fake_llama_server.py puts this folder on sys.path)
    from fake_script import VOCAB, tokenize  # type: ignore[no-redef]

__all__ = ["CHAT_MESSAGE_TOKENS", "CHAT_REPLY_TOKENS", "CHAT_TEMPLATE_TOKENS",
           "LLAMACPP_SLOT_PROMPT_SIMILARITY", "PromptCache", "chat_template", "common_prefix", "retokenized"]

LLAMACPP_SLOT_PROMPT_SIMILARITY = 0.1  # llama-server's --slot-prompt-similarity default
CHAT_MESSAGE_TOKENS = 3  # the template's tokens around one message: <|im_start|>, its role, <|im_end|>
CHAT_REPLY_TOKENS = 2  # the generation prompt that ends every chat prompt: <|im_start|> assistant
CHAT_TEMPLATE_TOKENS = CHAT_MESSAGE_TOKENS + CHAT_REPLY_TOKENS  # a one-message chat's template tokens


def chat_template(messages: Sequence[dict]) -> str:
    """The fake's chat prompt text of `messages` ({role, content} dicts, in order): each message's
    ``<|im_start|> ROLE CONTENT <|im_end|>`` on its own line, then ``<|im_start|> assistant``; its
    tokens = the contents' tokens + CHAT_MESSAGE_TOKENS per message + CHAT_REPLY_TOKENS."""
    lines = [f"<|im_start|> {m['role']} {m['content']} <|im_end|>" for m in messages]
    return "\n".join([*lines, "<|im_start|> assistant"])


def retokenized(ids: Sequence[int]) -> list[int]:
    """The ids the fake's tokenizer gives for the text of generated tokens `ids` (one per token)."""
    return [tokenize(VOCAB[i])[0] for i in ids]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of `a` and `b`, tokens."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PromptCache:
    """What each of `n_slots` slots holds, when each was last released, the host-memory cache
    (`saved`, oldest first), and the slot choice and prefix reuse of the module docstring.
    `similarity` None: the lowest idle slot (no LRU); `ram_tokens` None: no host-memory cache."""

    def __init__(self, n_slots: int, similarity: float | None, ram_tokens: int | None = None):
        self.similarity, self.ram_tokens = similarity, ram_tokens
        self.tokens: list[list[int]] = [[] for _ in range(n_slots)]
        self.released: list[int] = [-1] * n_slots  # release order of each slot; -1 = never used
        self.saved: list[list[int]] = []
        self._n_released = 0

    def choose(self, prompt: Sequence[int] | None, idle: Sequence[int]) -> int:
        """The slot, out of the non-empty `idle` (ascending), that a request of `prompt` takes."""
        return self._choose(prompt, idle)[0]

    def take(self, prompt: Sequence[int] | None, idle: Sequence[int]) -> int:
        """`choose`, then the host-memory cache's save and restore for that slot (module docstring)."""
        slot, similar = self._choose(prompt, idle)
        held = self.tokens[slot]
        if self.ram_tokens is None or not held:
            return slot
        if similar and prompt and common_prefix(held, prompt) >= 0.5 * len(held):
            return slot
        self._save(held)
        if prompt:
            self._restore(slot, prompt)
        while len(self.saved) > 1 and sum(map(len, self.saved)) > self.ram_tokens:
            self.saved.pop(0)
        return slot

    def _choose(self, prompt: Sequence[int] | None, idle: Sequence[int]) -> tuple[int, bool]:
        """(the slot `choose` gives, whether prompt similarity chose it)."""
        if self.similarity is None:
            return idle[0], False
        if self.similarity > 0 and prompt:
            best, best_sim = None, 0.0
            for i in idle:
                sim = common_prefix(self.tokens[i], prompt) / len(prompt) if self.tokens[i] else 0.0
                if sim > best_sim and sim > self.similarity:
                    best, best_sim = i, sim
            if best is not None:
                return best, True
        lru = idle[0]
        for i in idle[1:]:
            if self.released[i] <= self.released[lru]:
                lru = i
        return lru, False

    def _save(self, held: list[int]) -> None:
        if any(common_prefix(s, held) == len(held) for s in self.saved):
            return
        self.saved = [s for s in self.saved if common_prefix(s, held) < len(s)]
        self.saved.append(list(held))

    def _restore(self, slot: int, prompt: Sequence[int]) -> None:
        held = self.tokens[slot]
        n = common_prefix(held, prompt)
        keep_best, sim_best, best = n / len(held), n / len(prompt), None
        for k, s in enumerate(self.saved):
            n = common_prefix(s, prompt)
            keep, sim = n / len(s), n / len(prompt)
            if keep >= 0.25 and keep > keep_best and sim > sim_best:
                keep_best, sim_best, best = keep, sim, k
        if best is not None:
            self.tokens[slot] = self.saved.pop(best)

    def reuse(self, slot: int, prompt: Sequence[int] | None, cache_prompt: bool) -> int:
        """cache_n of a request of `prompt` entering `slot`: the prompt tokens it need not prefill."""
        if not cache_prompt or not prompt:
            return 0
        return min(common_prefix(self.tokens[slot], prompt), len(prompt) - 1)

    def release(self, slot: int, held: list[int]) -> None:
        """`slot` is idle again, holding `held` (its processed prompt and decoded tokens)."""
        self.tokens[slot] = held
        self.released[slot] = self._n_released
        self._n_released += 1
