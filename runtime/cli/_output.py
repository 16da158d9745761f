"""What the commands print: the JSON forms of sessions and events (the schema of
``--json``/``--jsonl``, documented in ``docs/cli.md``), listings in the three formats,
and progress bars.

``rich`` (tables, progress bars) is imported only when a table or a bar is drawn, so the
commands that never draw one do not pay for it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal, TextIO

import attrs

from runtime import JSON, SessionInfo, StoredEvent

__all__ = [
    "Column",
    "Format",
    "Listing",
    "compact",
    "dumps",
    "event_obj",
    "printable",
    "progress",
    "session_obj",
    "show_time",
]

Format = Literal["text", "json", "jsonl"]

#: Width of the data column of event lines and tables.
DATA_WIDTH = 72


#: One encoder for every record (``json.dumps`` with options builds a new one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def dumps(obj: object) -> str:
    """One line of JSON, ASCII only (so any terminal or pipe takes it), exact floats."""
    return _ENCODER.encode(obj)


def session_obj(info: SessionInfo) -> dict[str, JSON]:
    """The JSON form of a session (see docs/cli.md)."""
    return {
        "id": info.id,
        "head": info.head,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "header": info.header,
        "parent": None if info.parent is None else {"id": info.parent[0], "seq": info.parent[1]},
    }


def event_obj(event: StoredEvent) -> dict[str, JSON]:
    """The JSON form of an event (see docs/cli.md)."""
    return {
        "session_id": event.session_id,
        "seq": event.seq,
        "ts": event.ts,
        "kind": event.kind,
        "run_id": event.run_id,
        "data": event.data,
    }


def show_time(ts: float) -> str:
    """A time as local ``YYYY-MM-DD HH:MM:SS.mmm``."""
    return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="milliseconds")


def printable(text: str) -> str:
    """``text`` with every non-printable character (line and paragraph separators, C1
    controls...) escaped as ``\\uXXXX``, so one value stays on one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def compact(value: JSON, width: int | None = DATA_WIDTH) -> str:
    """One-line, printable JSON of ``value``, cut to ``width`` characters with ``...``."""
    text = printable(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    if width is not None and len(text) > width:
        text = text[: width - 3] + "..."
    return text


@attrs.frozen
class Column:
    """A column of a text table, and how it fits a narrow terminal: an ``"id"`` or
    ``"fixed"`` column is never cut (its cells print whole); a ``"text"`` column wraps.
    When even that does not fit, the columns with a ``drop`` rank are left out, lowest
    rank first, and a line under the table names them (``None``: never left out)."""

    name: str
    kind: Literal["id", "fixed", "text"] = "text"
    right: bool = False
    drop: int | None = None


def _column(spec: str | Column) -> Column:
    return spec if isinstance(spec, Column) else Column(spec)


class Listing:
    """A command's records, printed as they come in one of the three formats.

    * ``json``: one document, ``{**head, key: [record, ...], **tail}``, written as the
      records come (the array is streamed, so memory stays flat);
    * ``jsonl``: one record per line;
    * ``text``: with ``line``, one line per record as it comes (after ``header``); else a
      table drawn at the end (``columns``, ``cells`` per record; for bounded listings).
    """

    def __init__(
        self,
        fmt: Format,
        out: TextIO,
        *,
        key: str,
        head: dict[str, JSON] | None = None,
        columns: Sequence[str | Column] = (),
        header: str | None = None,
        line: Callable[[Sequence[str]], str] | None = None,
        title: str | None = None,
    ) -> None:
        self.fmt = fmt
        self.out = out
        self.key = key
        self.columns = [_column(c) for c in columns]
        self.line = line
        self.title = title
        self.rows: list[Sequence[str]] = []
        self.count = 0
        if fmt == "json":
            opening = dumps(head or {})[:-1]
            out.write(opening + ("," if head else "") + dumps(key) + ":[")
        elif fmt == "text" and line is not None and header is not None:
            out.write(header + "\n")

    def add(self, record: dict[str, JSON], cells: Sequence[str] = ()) -> None:
        """One record (its JSON form, and its table cells for text)."""
        if self.fmt == "json":
            self.out.write(("," if self.count else "") + dumps(record))
        elif self.fmt == "jsonl":
            self.out.write(dumps(record) + "\n")
        elif self.line is not None:
            self.out.write(self.line(cells) + "\n")
        else:
            self.rows.append(cells)
        self.count += 1

    def finish(self, tail: dict[str, JSON] | None = None, *, empty: str | None = None) -> None:
        """End the listing: close the JSON document (with ``tail``'s keys), or draw the
        table (``empty``, if given, is printed instead of an empty one)."""
        if self.fmt == "json":
            closing = dumps(tail)[1:] if tail else "}"
            self.out.write("]" + ("," if tail else "") + closing + "\n")
        elif self.fmt == "text" and self.line is None:
            if self.rows:
                table(self.out, self.columns, self.rows, title=self.title)
            elif empty is not None:
                self.out.write(empty + "\n")
        self.out.flush()


#: Above this many rows a table is aligned by hand: rich takes ~0.7 ms a row (14 s for
#: 20,000 sessions), which no one waits for.
RICH_ROWS = 2000


#: The narrowest a wrapping text column is made before columns are left out.
TEXT_MIN = 12
#: The width a column adds besides its cells in a rich table (padding and the gap).
GAP = 3


def table(
    out: TextIO,
    columns: Sequence[str | Column],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
) -> None:
    """Draw ``rows`` under ``columns``. On a terminal, with rich, fitted to its width
    with a rule under the header: ids and fixed cells are never cut; text columns wrap;
    if that is not enough, the lesser columns (:attr:`Column.drop`) are left out, and a
    line says which. Elsewhere (a pipe, a file) or past :data:`RICH_ROWS` rows, plain
    aligned columns, one line per row however long."""
    specs = [_column(c) for c in columns]
    if not out.isatty() or len(rows) > RICH_ROWS:
        _plain_table(out, specs, rows, title)
        return
    from rich import box
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, highlight=False)
    natural = [
        max([cell_len(c.name), *(cell_len(row[i]) for row in rows)]) for i, c in enumerate(specs)
    ]
    shown = list(range(len(specs)))

    def least(index: int) -> int:
        return natural[index] if specs[index].kind != "text" else min(natural[index], TEXT_MIN)

    def too_wide() -> bool:
        return sum(least(i) for i in shown) + GAP * (len(shown) - 1) > console.width

    dropped: list[int] = []
    while too_wide():
        droppable = [i for i in shown if specs[i].drop is not None]
        if not droppable:
            break
        worst = min(droppable, key=lambda i: (specs[i].drop, -i))
        shown.remove(worst)
        dropped.append(worst)
    for index in reversed(dropped[:-1]):  # one left out later may have made room for it
        shown = sorted([*shown, index])
        if too_wide():
            shown.remove(index)
        else:
            dropped.remove(index)
    room = console.width - GAP * (len(shown) - 1)
    widths = _fit([natural[i] for i in shown], [specs[i].kind for i in shown], room, TEXT_MIN)
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title=title)
    for index, width in zip(shown, widths, strict=True):
        spec = specs[index]
        whole = spec.kind != "text" and width >= natural[index]
        grid.add_column(
            spec.name,
            justify="right" if spec.right else "left",
            width=width,
            no_wrap=whole,
            overflow="fold",  # never an ellipsis: what does not fit goes on the next line
        )
    for row in rows:
        grid.add_row(*(row[i] for i in shown))
    console.print(grid, markup=False)
    if dropped:
        names = ", ".join(specs[i].name for i in sorted(dropped))
        note = f"(left out to fit {console.width} columns: {names}; --json shows all)"
        console.print(note, markup=False)  # (wrapped to the terminal's width)


def _fit(natural: list[int], kinds: list[str], room: int, least: int) -> list[int]:
    """Column widths within ``room``: the columns that do not wrap keep their natural
    width; the wrapping ones share what is left (none below ``least`` unless less is
    left), the narrow ones keeping theirs. If even that is too wide (an id longer than
    the terminal), the text columns get ``least`` and the ids share the rest: they fold,
    printed whole over several lines."""
    widths = list(natural)
    fixed = sum(w for w, kind in zip(natural, kinds, strict=True) if kind != "text")
    flexible = [i for i, kind in enumerate(kinds) if kind == "text"]
    left = room - fixed
    if left < least * len(flexible):
        ids = [i for i, kind in enumerate(kinds) if kind == "id"]
        for i in flexible:
            widths[i] = least
        spare = room - sum(widths[i] for i in range(len(kinds)) if i not in ids)
        total = sum(natural[i] for i in ids) or 1
        for i in ids:
            widths[i] = max(1, spare * natural[i] // total)
        return widths
    for i in sorted(flexible, key=lambda i: natural[i]):
        share = left // len(flexible)
        widths[i] = min(natural[i], max(least, share))
        left -= widths[i]
        flexible = [j for j in flexible if j != i]
    return widths


def _plain_table(
    out: TextIO,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str | None,
) -> None:
    widths = [max([len(c.name), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    last = len(columns) - 1
    if title:
        out.write(title + "\n")
    for row in [[c.name for c in columns], *rows]:
        cells = [
            cell
            if i == last
            else cell.rjust(widths[i])
            if columns[i].right
            else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        out.write("  ".join(cells).rstrip() + "\n")


def key_values(out: TextIO, rows: Sequence[tuple[str, str]]) -> None:
    """Print ``name: value`` lines, names aligned."""
    width = max((len(name) for name, _ in rows), default=0)
    for name, value in rows:
        out.write(f"{name + ':':<{width + 1}} {value}\n")


@contextmanager
def progress(
    label: str, total: int | None, *, unit: str, stream: TextIO | None = None
) -> Iterator[Callable[[int], None]]:
    """A progress bar on ``stream`` (default stderr) with the rate and the time left,
    for the block: yields ``advance(n)``. Nothing is drawn (and rich is not imported)
    unless ``stream`` is a terminal, so piped or captured output stays clean."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        yield lambda n: None  # noqa: ARG005 (the advance callback takes a count)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f} {unit}/s")

    class Done(ProgressColumn):
        """How much is done, without a total: ``N unit`` once there is any."""

        def render(self, task: Task) -> Text:
            return Text(f"{int(task.completed):,} {unit}" if task.completed else "")

    columns: list[Any] = [TextColumn("{task.description}"), BarColumn()]
    if total is None:  # no count to show against: what is done so far, and the time
        columns += [Done(), TextColumn("elapsed"), TimeElapsedColumn()]
    else:
        counted: list[Any] = [DownloadColumn(), TransferSpeedColumn()]
        if unit != "bytes":
            counted = [MofNCompleteColumn(), Rate()]
        columns += [*counted, TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(file=stream), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
