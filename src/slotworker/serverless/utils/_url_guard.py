"""Fetching job-supplied URLs without reaching private networks.

A job's input can name any URL, and the worker fetches it from inside the
platform's network, where it could otherwise reach cloud metadata services
(169.254.169.254) or other internal hosts. :func:`safe_get` refuses, as
runpod 1.12.0's downloader does:

- schemes other than http and https, and URLs without a host;
- hosts that resolve to any address that is not globally routable
  (loopback, private, link-local, CGNAT, reserved, multicast, unspecified,
  and IPv4-mapped IPv6 forms of these);
- URLs the environment would send through a proxy (a proxy resolves the
  host itself, so the address check would prove nothing);
- redirects to any of the above: every hop is checked again;
- a declared body larger than the size cap (:func:`iter_content_capped`
  enforces the cap on what actually arrives).

The connection is opened to the address that was checked, so a DNS answer
that changes between the check and the connect cannot redirect it.

``RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS=true`` (or 1, yes) lifts the address and
proxy checks; ``RUNPOD_MAX_DOWNLOAD_BYTES`` sets the cap (default 5 GiB).
Both are read at each call.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urljoin, urlparse

import requests
from requests.adapters import HTTPAdapter
from requests.utils import get_environ_proxies, select_proxy

ALLOW_PRIVATE_ENV = "RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS"
MAX_BYTES_ENV = "RUNPOD_MAX_DOWNLOAD_BYTES"
DEFAULT_MAX_BYTES = 5 * 1024 ** 3
MAX_REDIRECTS = 5

_SCHEMES = ("http", "https")
_REDIRECTS = frozenset((301, 302, 303, 307, 308))
# Shared address space (RFC 6598): older Pythons do not count it as private.
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


class SSRFError(ValueError):
    """A URL was refused: not http(s), not public, proxied, or its body is too large.

    A ``ValueError`` and not a ``requests.RequestException``, so download
    retries and "failed download" handling do not swallow it.
    """


def private_urls_allowed() -> bool:
    """True when the environment lifts the address and proxy checks."""
    return os.environ.get(ALLOW_PRIVATE_ENV, "").strip().lower() in ("1", "true", "yes")


def max_download_bytes() -> int:
    """The per-download size cap: ``RUNPOD_MAX_DOWNLOAD_BYTES`` if it is a
    positive integer, else 5 GiB."""
    try:
        value = int(os.environ.get(MAX_BYTES_ENV, ""))
    except ValueError:
        return DEFAULT_MAX_BYTES
    return value if value > 0 else DEFAULT_MAX_BYTES


def is_public_address(ip: str) -> bool:
    """True only for a globally routable unicast address; unparsable text is not."""
    try:
        address: Any = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if getattr(address, "ipv4_mapped", None) is not None:
        address = address.ipv4_mapped
    if address in _CGNAT:
        return False
    if (address.is_private or address.is_loopback or address.is_link_local or address.is_reserved
            or address.is_multicast or address.is_unspecified):
        return False
    return bool(address.is_global)


def resolve(host: str, port: int) -> List[str]:
    """The addresses ``host`` resolves to, in resolver order.

    Raises :class:`SSRFError` if it does not resolve, or (unless private
    URLs are allowed) if any of its addresses is not public: a name that
    answers with both a public and a private address is treated as hostile.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise SSRFError(f"cannot resolve host {host!r}: {exc}") from exc
    addresses: List[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise SSRFError(f"host {host!r} resolves to no address")
    if not private_urls_allowed():
        for address in addresses:
            if not is_public_address(address):
                raise SSRFError(f"refusing {host!r}: it resolves to {address}, which is not a public "
                                f"address (set {ALLOW_PRIVATE_ENV}=true to allow private URLs)")
    return addresses


def _authority(url: str) -> str:
    """The Host header for ``url`` (IPv6 literals bracketed, the port if one is given)."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return host if parsed.port is None else f"{host}:{parsed.port}"


class _PinnedAdapter(HTTPAdapter):
    """An adapter that connects to one checked address whatever the URL's host
    resolves to now, while TLS (SNI, certificate name) and the Host header
    still use the URL's host name."""

    def __init__(self, address: str) -> None:
        self._address = address
        super().__init__(max_retries=0)

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        request.headers["Host"] = _authority(str(request.url))
        return super().send(request, *args, **kwargs)

    def _tls_names(self, url: str) -> Dict[str, Any]:
        hostname = urlparse(url).hostname
        return {"server_hostname": hostname, "assert_hostname": hostname}

    # requests >= 2.32.2 asks this for the connection pool's key.
    def build_connection_pool_key_attributes(self, request: requests.PreparedRequest, verify: Any,
                                             cert: Any = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        host_params["host"] = self._address
        if host_params.get("scheme") == "https":
            pool_kwargs.update(self._tls_names(str(request.url)))
        return host_params, pool_kwargs

    # Older requests call this instead. Through a proxy (only possible when
    # private URLs are allowed) the proxy connects, so there is nothing to pin.
    def get_connection(self, url: str, proxies: Optional[Dict[str, str]] = None) -> Any:
        if select_proxy(url, proxies or {}):
            return super().get_connection(url, proxies)
        parsed = urlparse(url)
        scheme = parsed.scheme.lower()
        port = parsed.port or (443 if scheme == "https" else 80)
        pool_kwargs = self._tls_names(url) if scheme == "https" else None
        return self.poolmanager.connection_from_host(self._address, port, scheme, pool_kwargs=pool_kwargs)


def _check_url(url: str) -> Tuple[str, int]:
    parsed = urlparse(url)
    if parsed.scheme not in _SCHEMES:
        raise SSRFError(f"refusing {url!r}: only http and https URLs can be downloaded")
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError as exc:  # a port that is not a number
        raise SSRFError(f"refusing {url!r}: {exc}") from exc
    if not parsed.hostname:
        raise SSRFError(f"refusing {url!r}: it has no host")
    if not private_urls_allowed():
        proxy = select_proxy(url, get_environ_proxies(url))
        if proxy:
            raise SSRFError(f"refusing {url!r}: the environment routes it through proxy {proxy}, where "
                            f"its address cannot be checked (set {ALLOW_PRIVATE_ENV}=true to allow)")
    return parsed.hostname, port


def _get_first_reachable(addresses: List[str], url: str, headers: Optional[Dict[str, str]],
                         timeout: Any, stream: bool = True) -> Tuple[requests.Session, requests.Response]:
    # A name often has several addresses (IPv6 and IPv4); like a plain
    # connect, try them in order, moving on only when one cannot be reached.
    last: Optional[Exception] = None
    for address in addresses:
        session = requests.Session()
        session.mount("http://", _PinnedAdapter(address))
        session.mount("https://", _PinnedAdapter(address))
        try:
            response = session.get(url, headers=headers, stream=stream, timeout=timeout, allow_redirects=False)
        except requests.ConnectionError as exc:
            session.close()
            last = exc
            continue
        except BaseException:
            session.close()
            raise
        return session, response
    assert last is not None  # resolve() never returns an empty list
    raise last


def _close_with(response: requests.Response, session: requests.Session) -> None:
    """Make ``response.close()`` (and ``with response:``) close ``session`` too,
    so a long-lived worker does not keep one connection pool per download."""
    close_response = response.close

    def close() -> None:
        try:
            close_response()
        finally:
            session.close()

    response.close = close  # type: ignore[method-assign]


def _declared_length(response: requests.Response) -> Optional[int]:
    """Content-Length as an int; None when absent or not a number (the
    streaming cap still holds then)."""
    try:
        return int(response.headers.get("Content-Length", ""))
    except ValueError:
        return None


def safe_get(url: str, *, stream: bool = True, timeout: Any = 30, headers: Optional[Dict[str, str]] = None,
             max_bytes: Optional[int] = None, max_redirects: int = MAX_REDIRECTS) -> requests.Response:
    """GET ``url`` with the checks of this module; returns the response.

    With ``stream`` (the default) the body is left to the caller, to read
    with :func:`iter_content_capped` and close, best with ``with
    safe_get(...) as response:``. ``max_bytes`` defaults to
    :func:`max_download_bytes`. HTTP error statuses are returned, not
    raised. Raises :class:`SSRFError` when a check refuses,
    ``requests.RequestException`` when the fetch fails.
    """
    cap = max_download_bytes() if max_bytes is None else max_bytes
    current = url
    for _hop in range(max_redirects + 1):
        host, port = _check_url(current)
        session, response = _get_first_reachable(resolve(host, port), current, headers, timeout, stream)
        if response.status_code in _REDIRECTS:
            location = response.headers.get("Location")
            response.close()
            session.close()
            if not location:
                raise SSRFError(f"redirect from {current!r} has no Location")
            current = urljoin(current, location)
            continue
        _close_with(response, session)
        declared = _declared_length(response)
        if declared is not None and declared > cap:
            response.close()
            raise SSRFError(f"refusing {current!r}: its body is {declared} bytes, over the "
                            f"{cap}-byte cap ({MAX_BYTES_ENV})")
        return response
    raise SSRFError(f"refusing {url!r}: more than {max_redirects} redirects")


def iter_content_capped(response: requests.Response, chunk_size: int, max_bytes: Optional[int]) -> Iterator[bytes]:
    """The body of ``response`` in chunks; :class:`SSRFError` (and the
    response closed) as soon as more than ``max_bytes`` have arrived
    (``None``: no cap).

    It holds whatever the server declared, including no length at all.
    """
    total = 0
    for chunk in response.iter_content(chunk_size=chunk_size):
        if not chunk:
            continue
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            response.close()
            raise SSRFError(f"download exceeds the {max_bytes}-byte cap ({MAX_BYTES_ENV})")
        yield chunk
