"""The head of an HTTP/1.x request, read for the local platform: request line and headers.

:mod:`http.server` reads headers through the :mod:`email` package: about
50 µs for the eight headers a worker sends with each result, a fifth of
what the platform spends on a result post. Every job's result is one post,
and at 1,024 slots the platform, in one process with the GIL, answers
thousands a second. This reads the same head with a few ``bytes``
operations, and is stricter where the email parser was lenient: a header
line that is not ``name: value`` is a 400, not a silent defect.

What it takes: a request line ``METHOD target HTTP/x.y`` (under 2.0;
anything else is a 400, or a 505 for a later version); header lines up to
64 KiB each and at most 100 of them (else a 431, as :mod:`http.server`
answers); a line starting with a space or a tab continues the header
before it (its text joins that value after one space). A connection that
ends inside the head is a 400 too: nothing half-read is dispatched.

:func:`split_target` then reads the target's path segments and query as
:mod:`urllib.parse` reads them, with a plain split where nothing needs
unquoting (every worker request).
"""

from __future__ import annotations

import re
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qsl, unquote, urlsplit

#: The longest request or header line, in bytes (http.server's limit).
MAX_LINE = 65536
#: The most header lines a request may carry.
MAX_HEADERS = 100

_BLANK = (b"\r\n", b"\n")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 token)
_VERSION = re.compile(r"HTTP/([0-9]{1,10})\.([0-9]{1,10})")


class HeadError(Exception):
    """The request's head cannot be read; ``status`` is the answer it gets."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RequestHeaders:
    """A request's headers, in the order they came.

    ``get`` matches names without regard to case and answers the first of
    a repeated name, as :class:`email.message.Message` does; ``items``
    keeps each name as it was sent.
    """

    __slots__ = ("_items", "_first")

    def __init__(self, items: List[Tuple[str, str]]) -> None:
        self._items = items
        first: Dict[str, str] = {}
        for name, value in items:
            first.setdefault(name.lower(), value)
        self._first = first

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The first value of header ``name`` (any case), else ``default``."""
        return self._first.get(name.lower(), default)

    def get_all(self, name: str) -> List[str]:
        """Every value of header ``name`` (any case), in order."""
        key = name.lower()
        return [value for item, value in self._items if item.lower() == key]

    def items(self) -> List[Tuple[str, str]]:
        """``(name, value)`` pairs as sent, in order."""
        return list(self._items)

    def keys(self) -> List[str]:
        """The names as sent, in order (a repeated name as often as it came)."""
        return [name for name, _ in self._items]

    def values(self) -> List[str]:
        """The values, in order."""
        return [value for _, value in self._items]

    def __getitem__(self, name: str) -> Optional[str]:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"RequestHeaders({self._items!r})"


def parse_request_line(line: str) -> Tuple[str, str, str, Tuple[int, int]]:
    """``(method, target, version, (major, minor))`` of a request line without its line end."""
    words = line.split()
    if len(words) != 3:
        raise HeadError(400, f"bad request line: {line[:200]!r}")
    method, target, version = words
    match = _VERSION.fullmatch(version)
    if match is None:
        raise HeadError(400, f"bad HTTP version: {version[:50]!r}")
    number = int(match.group(1)), int(match.group(2))
    if number >= (2, 0):
        raise HeadError(505, f"HTTP version {version} is not supported")
    return method, target, version, number


def split_target(target: str) -> Tuple[List[str], Dict[str, str]]:
    """A request target's path segments (unquoted, empty ones dropped) and its query fields.

    For a target as the server reads one (no white space, no leading
    ``//``), the same as :func:`urllib.parse.urlsplit`,
    :func:`~urllib.parse.unquote` on each segment and ``dict(parse_qsl(query,
    keep_blank_values=True))`` (a repeated field: the last one), with a
    plain split where nothing needs unquoting: every worker request but
    one for a job id that needs quoting. The library's way cost about a
    tenth of what the platform spends on a result post.
    """
    if target[:1] == "/" and target[1:2] != "/" and "%" not in target and "+" not in target and "#" not in target:
        path, _, query = target.partition("?")
        fields: Dict[str, str] = {}
        for pair in query.split("&"):
            if pair:
                name, _, value = pair.partition("=")
                fields[name] = value
        return [part for part in path.split("/") if part], fields
    split = urlsplit(target)
    return ([unquote(part) for part in split.path.split("/") if part],
            dict(parse_qsl(split.query, keep_blank_values=True)))


def read_headers(rfile: BinaryIO) -> RequestHeaders:
    """Read header lines from ``rfile`` up to the blank line that ends them."""
    items: List[Tuple[str, str]] = []
    lines = 0
    while True:
        line = rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise HeadError(431, "a header line is over 64 KiB")
        if not line:  # the client closed the connection before the end of the headers
            raise HeadError(400, "the connection ended inside the request's headers")
        if line in _BLANK:
            return RequestHeaders(items)
        lines += 1
        if lines > MAX_HEADERS:
            raise HeadError(431, f"more than {MAX_HEADERS} header lines")
        if line[:1] in (b" ", b"\t"):  # continues the header before it (obsolete folding)
            if not items:
                raise HeadError(400, "the first header line starts with white space")
            name, value = items[-1]
            more = line.strip().decode("latin-1")
            items[-1] = (name, f"{value} {more}" if value and more else value or more)
            continue
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            raise HeadError(400, f"bad header line: {line[:100]!r}")
        items.append((name.decode("ascii"), value.strip(b" \t\r\n").decode("latin-1")))
