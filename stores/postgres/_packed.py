"""A batch statement's columns sent as one text parameter each, split by the server.

The one-statement append paths (:mod:`stores.postgres._ops`, :mod:`stores.postgres._known`)
take a batch as columns: one list per column, unnested on the server. psycopg dumps a list
parameter as an array element by element in Python (its list dumper calls each element's
dumper and packs its length); a list of 100 texts costs more client CPU than the rest of
the batch's Python. Here each column goes as one ``text``: the values joined with a
separator they cannot contain (one C-level join and encode in the client) and split again
by the server with ``string_to_array`` (C). A batch of 100 one-event appends: 206 -> 135 us
of the store thread's CPU and 803 -> 684 us at the server (``bench/HISTORY.md``).

The separators:

* texts -- session ids, kinds, run ids, owners, JSON texts -- are joined with U+001E
  (RECORD SEPARATOR), a control character: validated ids, kinds and run ids have none, and
  JSON text has none (a string's control characters are always escaped, and no JSON
  whitespace is one). The values are checked anyway (a separator in one of them is
  looked for, and an empty text, which the split could not tell from no element, is
  refused), so a value made another way is never split wrong: a ``pack_*`` function
  returns ``None`` and the caller takes a path that sends the values as they are.
* ``None`` is a text of its own, U+001F (UNIT SEPARATOR) alone, in a column of texts, and
  ``n`` in a column of integers (``string_to_array``'s null string): an empty text
  would not do, as ``string_to_array('', ...)`` is the empty array, not ``{NULL}``.
* integers are joined with ``,`` and cast on the server.

Each ``pack_*`` function has its SQL in the function of the same column type:
:func:`texts`, :func:`nullable_texts`, :func:`ints` give the expression that turns the
parameter ``name`` back into the array.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "NULL_INT",
    "NULL_TEXT",
    "SEPARATOR",
    "ints",
    "nullable_texts",
    "pack_ints",
    "pack_nullable_texts",
    "pack_texts",
    "texts",
]

#: What joins the texts of one column: U+001E, RECORD SEPARATOR (see the module doc).
SEPARATOR = "\x1e"
#: What stands for ``None`` in a column of texts: U+001F, UNIT SEPARATOR, alone.
NULL_TEXT = "\x1f"
#: What stands for ``None`` in a column of integers.
NULL_INT = "n"


def texts(name: str) -> str:
    """The SQL of the ``text[]`` that :func:`pack_texts` packed into parameter ``name``."""
    return f"string_to_array(%({name})s, E'\\x1e')"


def nullable_texts(name: str) -> str:
    """The SQL of the ``text[]`` that :func:`pack_nullable_texts` packed into ``name``."""
    return f"string_to_array(%({name})s, E'\\x1e', E'\\x1f')"


def ints(name: str, sql_type: str = "bigint") -> str:
    """The SQL of the ``sql_type[]`` (``NULL`` for ``None``) that :func:`pack_ints`
    packed into parameter ``name``."""
    return f"string_to_array(%({name})s, ',', '{NULL_INT}')::{sql_type}[]"


def pack_texts(values: Sequence[str]) -> str | None:
    """``values`` as one text for :func:`texts`; ``None`` if one of them is empty or holds
    the separator (the caller sends them another way)."""
    if not values:
        return ""
    # Looked for in the values joined without separators: a memchr over the text, where
    # counting the separators of the joined column (the first way) cost ten times as much.
    if "" in values or SEPARATOR in "".join(values):
        return None
    return SEPARATOR.join(values)


def pack_nullable_texts(values: Sequence[str | None]) -> str | None:
    """``values`` (``None`` for SQL ``NULL``) as one text for :func:`nullable_texts`;
    ``None`` as :func:`pack_texts` refuses, and for a value that is the null mark."""
    nulls = values.count(None)
    if nulls == len(values):  # the usual column of run ids or owners: no value at all
        return SEPARATOR.join([NULL_TEXT] * nulls)
    if NULL_TEXT in values:
        return None
    return pack_texts([NULL_TEXT if value is None else value for value in values])


def pack_ints(values: Sequence[int | None]) -> str:
    """``values`` (``None`` for SQL ``NULL``) as one text for :func:`ints`."""
    if None in values:
        return ",".join(NULL_INT if value is None else str(value) for value in values)
    return ",".join(map(str, values))
