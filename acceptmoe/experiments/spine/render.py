"""Plain renderers for tables given as a header and rows of already formatted cells: Markdown, LaTeX, CSV."""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence

Row = Sequence[str]


def markdown(header: Row, rows: Sequence[Row], title: str | None = None) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False)) + " |"
    out = [f"**{title}**", ""] if title else []
    out += [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def latex(header: Row, rows: Sequence[Row], caption: str, label: str, rule_before: int | None = None) -> str:
    """A booktabs table; `rule_before`: index of the row above which a midrule separates summary rows."""
    cols = "ll" + "r" * (len(header) - 2)
    body = []
    for i, r in enumerate(rows):
        if i == rule_before:
            body.append(r"\midrule")
        body.append(" & ".join(latex_escape(c) for c in r) + r" \\")
    return "\n".join([r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(caption)}}}",
                      rf"\label{{{label}}}", rf"\begin{{tabular}}{{{cols}}}", r"\toprule",
                      " & ".join(latex_escape(h) for h in header) + r" \\", r"\midrule", *body,
                      r"\bottomrule", r"\end{tabular}", r"\end{table}"]) + "\n"


def csv_text(records: Sequence[dict]) -> str:
    """CSV of dict records (columns: every record's keys, in first-seen order; missing values are empty)."""
    if not records:
        return ""
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in records for k in r))
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return buf.getvalue()
