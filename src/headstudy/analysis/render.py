"""A report is a list of blocks (kind, content); this renders them as markdown and as one
self-contained HTML file (figures inlined), so both always say the same thing."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import pandas as pd

Block = tuple[str, object]
CODE = re.compile(r"`([^`]+)`")  # markdown's inline code, as HTML shows it
# A cell that holds only numbers: digits with their signs, separators, units and intervals.
NUMERIC = re.compile(r"[\d\s.,%+\-−–±</\[\]()]*\d[\d\s.,%+\-−–±</\[\]()]*")


def numeric_columns(table: pd.DataFrame) -> list[bool]:
    """Columns whose every non-empty cell is a number (or "n/a"): these are right-aligned."""
    return [
        any(NUMERIC.fullmatch(str(c)) for c in column)
        and all(NUMERIC.fullmatch(str(c)) or str(c) in ("", "n/a") for c in column)
        for _, column in table.items()
    ]


def to_markdown(blocks: list[Block], base: Path) -> str:
    out = []
    for kind, content in blocks:
        out.append(
            {
                "title": lambda c: f"# {c}",
                "heading": lambda c: f"## {c}",
                "text": lambda c: c,
                "table": lambda c: c.to_markdown(
                    index=False,
                    disable_numparse=True,
                    colalign=["right" if numeric else "left" for numeric in numeric_columns(c)],
                ),
                "figure": lambda c: markdown_image(c, base),
            }[kind](content)
        )
    return "\n\n".join(out) + "\n"


def markdown_image(path: Path, base: Path) -> str:
    return f"![{path.stem.replace('_', ' ')}]({Path(path).relative_to(base).as_posix()})"


def html_image(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<figure><img alt="{path.stem.replace("_", " ")}" src="data:image/png;base64,{data}"></figure>'


STYLE = (
    "body{font-family:sans-serif;max-width:64em;margin:2em auto;padding:0 1em;line-height:1.45}"
    "table{border-collapse:collapse;display:block;overflow-x:auto;max-width:100%}"
    "td,th{padding:.3em .8em;border-bottom:1px solid #ccc;text-align:left;vertical-align:top}"
    ".num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "figure{margin:1em 0}img{max-width:100%;height:auto}"
)


def html_table(table: pd.DataFrame) -> str:
    align = [' class="num"' if numeric else "" for numeric in numeric_columns(table)]
    head = "".join(f"<th{a}>{html.escape(str(name))}</th>" for a, name in zip(align, table.columns, strict=False))
    rows = "".join(
        "<tr>"
        + "".join(f"<td{a}>{html.escape(str(value))}</td>" for a, value in zip(align, row, strict=False))
        + "</tr>"
        for row in table.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def to_html(blocks: list[Block], title: str) -> str:
    body = []
    for kind, content in blocks:
        if kind == "figure":
            body.append(html_image(content))
        elif kind == "table":
            body.append(html_table(content))
        else:
            tag = {"title": "h1", "heading": "h2", "text": "p"}[kind]
            text = CODE.sub(r"<code>\1</code>", html.escape(content))
            body.append(f"<{tag}>{text}</{tag}>")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
