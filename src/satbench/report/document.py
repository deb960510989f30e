"""The report as a list of typed blocks, rendered two ways: EVIDENCE.md and report.html.

One content, two renderers, so the Markdown and the HTML can never say different things.
Text may hold `inline code` in backticks; everything else is escaped. The HTML is one
self-contained file: its CSS is inline and its plots are embedded as data: URIs, so it needs
no network and no other file to be read.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from satbench.config.schema import Strict


class Heading(Strict):
    kind: Literal["heading"] = "heading"
    level: int = Field(ge=1, le=4)
    text: str


class Para(Strict):
    kind: Literal["para"] = "para"
    text: str


class Code(Strict):
    kind: Literal["code"] = "code"
    text: str


class Bullets(Strict):
    kind: Literal["bullets"] = "bullets"
    items: list[str]


class TableBlock(Strict):
    kind: Literal["table"] = "table"
    headers: list[str]
    rows: list[list[str]]
    caption: str | None = None


class Image(Strict):
    kind: Literal["image"] = "image"
    file: str = Field(description="relative to the run directory")
    title: str
    caption: str


Block = Heading | Para | Code | Bullets | TableBlock | Image

# ---------------------------------------------------------------- Markdown


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ") or " "


def _md_table(t: TableBlock) -> str:
    lines = []
    if t.caption:
        lines += [f"*{t.caption}*", ""]
    lines.append("| " + " | ".join(_md_cell(h) for h in t.headers) + " |")
    lines.append("|" + "|".join("---" for _ in t.headers) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines)


def _md_block(b: Block) -> str:
    if isinstance(b, Heading):
        return "#" * b.level + " " + b.text
    if isinstance(b, Para):
        return b.text
    if isinstance(b, Code):
        fence = "````" if "```" in b.text else "```"
        return f"{fence}\n{b.text}\n{fence}"
    if isinstance(b, Bullets):
        return "\n".join(f"- {item}" for item in b.items)
    if isinstance(b, TableBlock):
        return _md_table(b)
    return f"![{b.title}]({b.file})\n\n*{b.caption}*"


def render_markdown(blocks: Sequence[Block]) -> str:
    return "\n\n".join(_md_block(b) for b in blocks) + "\n"

# ---------------------------------------------------------------- HTML


_CODE_SPAN = re.compile(r"`([^`]+)`")
CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #1a1a1a; line-height: 1.45; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; white-space: nowrap; }
caption { caption-side: top; text-align: left; font-style: italic; padding-bottom: .3em; }
code { background: #f4f4f4; padding: 0 .2em; font-size: 92%; }
pre { background: #f4f4f4; padding: .6em; overflow-x: auto; font-size: 12px; white-space: pre-wrap;
      word-break: break-all; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; display: block; }
figcaption { font-size: 13px; color: #444; max-width: 1100px; }
.verdict-fail { color: #b00020; font-weight: bold; }
.verdict-pass { color: #1b7f1b; }
.verdict-inconclusive { color: #9a6a00; }
.verdict-marginal { color: #8a2be2; }
"""


def _inline(text: str) -> str:
    return _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", html.escape(text, quote=False))


_NUMERIC = re.compile(r"^(n/a|[-\d.,±×*/ \[\]–?%])+$")


def _cell(text: str) -> str:
    cls = {"pass": "verdict-pass", "fail": "verdict-fail", "inconclusive": "verdict-inconclusive",
           "marginal": "verdict-marginal"}.get(text)
    if cls is None and _NUMERIC.match(text):
        cls = "num"
    return f'<td class="{cls}">{_inline(text)}</td>' if cls else f"<td>{_inline(text)}</td>"


def _html_table(t: TableBlock) -> str:
    head = "".join(f"<th>{_inline(h)}</th>" for h in t.headers)
    body = "\n".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in t.rows)
    cap = f"<caption>{_inline(t.caption)}</caption>" if t.caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>"


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _html_block(b: Block, run_dir: Path) -> str:
    if isinstance(b, Heading):
        anchor = re.sub(r"[^a-z0-9]+", "-", b.text.lower()).strip("-")
        return f'<h{b.level} id="{anchor}">{_inline(b.text)}</h{b.level}>'
    if isinstance(b, Para):
        return f"<p>{_inline(b.text)}</p>"
    if isinstance(b, Code):
        return f"<pre><code>{html.escape(b.text, quote=False)}</code></pre>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, TableBlock):
        return _html_table(b)
    alt = html.escape(b.title)
    return (f'<figure data-plot="{html.escape(b.file)}"><img alt="{alt}" src="{_data_uri(run_dir / b.file)}">'
            f"<figcaption><b>{_inline(b.title)}.</b> {_inline(b.caption)}</figcaption></figure>")


def render_html(blocks: Sequence[Block], run_dir: Path, title: str) -> str:
    body = "\n".join(_html_block(b, run_dir) for b in blocks)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")
