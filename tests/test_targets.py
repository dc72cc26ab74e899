"""split_target: a request target's path segments and query, as urllib reads them."""

from __future__ import annotations

import random
from urllib.parse import parse_qsl, unquote, urlsplit

from slotworker.platform.targets import split_target


def _as_urllib_reads_it(target: str) -> tuple:
    split = urlsplit(target)
    return [unquote(part) for part in split.path.split("/") if part], dict(parse_qsl(split.query, keep_blank_values=True))


def test_a_target_is_split_as_urllib_splits_it() -> None:
    # The plain split (nothing to unquote) and urllib's way must agree on
    # every target, so seeded random ones mix what each path handles.
    assert split_target("/v2/ep/job-done/w-1/j-1?gpu=local&isStream=false") == (
        ["v2", "ep", "job-done", "w-1", "j-1"], {"gpu": "local", "isStream": "false"})
    assert split_target("/a//b/?x&y=&x=2") == (["a", "b"], {"x": "2", "y": ""})
    assert split_target("/a%2Fb?q=a+b%26c#frag") == (["a/b"], {"q": "a b&c"})
    pieces = ["/", "a", "?", "&", "=", "%20", "%2F", "+", "#", ";", "//", "==", "http:", "\u00e9"]
    rng = random.Random(11)
    for _ in range(20000):
        target = rng.choice(["/", ""]) + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert split_target(target) == _as_urllib_reads_it(target), target
