"""A report is a list of blocks (kind, content); this renders them as markdown and as one
self-contained HTML file (figures inlined), so both always say the same thing.

Kinds: `title`; `headline`, the answer in a few lines with their CIs, boxed at the top; `heading`
(each one gets an anchor and a line in the table of contents); `text`; `table` (a DataFrame);
`figure`, (path to a PNG, its caption), numbered in order."""

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


def anchors(blocks: list[Block]) -> list[str]:
    """Each heading's anchor, as GitHub makes it for markdown (lower case, punctuation dropped,
    spaces to hyphens, `-1`, `-2` after a repeat), so that both renderings link alike."""
    found: list[str] = []
    seen: dict[str, int] = {}
    for kind, content in blocks:
        if kind == "heading":
            base = re.sub(r"[^\w\- ]", "", str(content).lower()).replace(" ", "-")
            found.append(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return found


def with_contents(blocks: list[Block]) -> list[Block]:
    """The blocks with the table of contents (when there are headings) after the title and the
    headline box, and each figure's caption numbered: `Figure 2. ...`."""
    headings = [content for kind, content in blocks if kind == "heading"]
    contents = [("contents", list(zip(headings, anchors(blocks), strict=True)))] if headings else []
    at = next((i for i, (kind, _) in enumerate(blocks) if kind not in ("title", "headline")), len(blocks))
    numbered, figures = [], 0
    for kind, content in [*blocks[:at], *contents, *blocks[at:]]:
        if kind == "figure":
            figures += 1
            path, caption = content
            content = (Path(path), f"Figure {figures}. {caption}")
        numbered.append((kind, content))
    return numbered


def headline_of(markdown: str) -> list[str]:
    """The lines of a report's headline box, read back from its markdown: to_markdown writes the
    box right after the title, each line as `> **line**`, separated by `>`."""
    found = []
    for line in markdown.splitlines()[1:]:
        if line.startswith("> **") and line.endswith("**"):
            found.append(line[4:-2])
        elif line != ">" and (found or line.strip()):
            break
    return found


def to_markdown(blocks: list[Block], base: Path) -> str:
    out = []
    for kind, content in with_contents(blocks):
        out.append(
            {
                "title": lambda c: f"# {c}",
                "headline": lambda c: "\n>\n".join(f"> **{line}**" for line in c),
                "contents": lambda c: "Contents: " + " · ".join(f"[{text}](#{anchor})" for text, anchor in c),
                "heading": lambda c: f"## {c}",
                "text": lambda c: c,
                "table": lambda c: c.to_markdown(
                    index=False,
                    disable_numparse=True,
                    colalign=["right" if numeric else "left" for numeric in numeric_columns(c)],
                ),
                "figure": lambda c: f"{markdown_image(c[0], base)}\n\n*{c[1]}*",
            }[kind](content)
        )
    return "\n\n".join(out) + "\n"


def markdown_image(path: Path, base: Path) -> str:
    return f"![{path.stem.replace('_', ' ')}]({Path(path).relative_to(base).as_posix()})"


def inline(text: str) -> str:
    """Text as HTML, markdown's inline code as <code>."""
    return CODE.sub(r"<code>\1</code>", html.escape(text))


def html_image(path: Path, caption: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return (
        f'<figure><img alt="{path.stem.replace("_", " ")}" src="data:image/png;base64,{data}">'
        f"<figcaption>{inline(caption)}</figcaption></figure>"
    )


# Text at a reading width; tables and figures use the page's, a table wider than the page
# scrolling inside its own box.
STYLE = (
    "body{font-family:sans-serif;max-width:84em;margin:2em auto;padding:0 1.5em;line-height:1.45}"
    "p,nav,figcaption,.headline{max-width:52em}"
    ".headline{border:2px solid #2b6cb0;border-radius:6px;background:#eef5fc;padding:.4em 1.2em;margin:1.2em 0;"
    "font-size:1.1em}.headline p{margin:.5em 0;font-weight:600}"
    "nav{margin:1em 0}nav ol{margin:.3em 0;padding-left:1.6em;columns:2 18em}"
    "h2{margin-top:1.8em}h2 a.anchor{margin-left:.4em;color:#999;text-decoration:none;font-weight:normal}"
    "h2:hover a.anchor,h2 a.anchor:focus{color:#2b6cb0}"
    ".table{overflow-x:auto;max-width:100%;margin:1em 0}"
    "table{border-collapse:collapse}"
    "td,th{padding:.3em .8em;border-bottom:1px solid #ccc;text-align:left;vertical-align:top}"
    "td:first-child,th:first-child{min-width:11em}"
    ".num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}th.num{white-space:normal}"
    "figure{margin:1em 0}img{max-width:100%;height:auto}figcaption{color:#333;margin-top:.3em}"
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
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


def to_html(blocks: list[Block], title: str) -> str:
    body = []
    headings = iter(anchors(blocks))
    for kind, content in with_contents(blocks):
        if kind == "figure":
            body.append(html_image(*content))
        elif kind == "table":
            body.append(html_table(content))
        elif kind == "headline":
            lines = "".join(f"<p>{inline(line)}</p>" for line in content)
            body.append(f'<aside class="headline" aria-label="The answer">{lines}</aside>')
        elif kind == "contents":
            items = "".join(f'<li><a href="#{anchor}">{inline(text)}</a></li>' for text, anchor in content)
            body.append(f'<nav aria-label="Contents"><strong>Contents</strong><ol>{items}</ol></nav>')
        elif kind == "heading":
            anchor = next(headings)
            body.append(
                f'<h2 id="{anchor}">{inline(content)}<a class="anchor" href="#{anchor}" '
                f'aria-label="Link to this section">#</a></h2>'
            )
        else:
            tag = {"title": "h1", "text": "p"}[kind]
            body.append(f"<{tag}>{inline(content)}</{tag}>")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
