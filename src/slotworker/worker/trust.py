"""Which certificate authorities the worker trusts for an HTTPS platform.

Users of runpod's SDK point it at a private CA two ways: OpenSSL's
variables (``SSL_CERT_FILE``, ``SSL_CERT_DIR``), which its takes and results
read through the default SSL context, and requests' (``REQUESTS_CA_BUNDLE``,
``CURL_CA_BUNDLE``), which its heartbeat reads. Either alone must be enough
here, so the worker's one context trusts all of them, beside certifi's
bundle (requests' default) and the system store. Certificates and host
names are always checked: nothing here turns verification off.

The environment is read when :func:`trust_context` is called (once, when a
worker's client is built), never at import.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import List, Mapping, Optional, Tuple

from requests.utils import DEFAULT_CA_BUNDLE_PATH

log = logging.getLogger("slotworker")

#: The variables read for extra CA certificates, in the order they are loaded.
CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")

#: What a refused handshake's log line says about supplying a CA.
HOW_TO_TRUST = ("the worker trusts certifi's bundle, the system store, and a CA file or directory named by "
                "SSL_CERT_FILE, SSL_CERT_DIR, REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE: "
                "set one of them to the platform's CA")


def ca_locations(environ: Mapping[str, str]) -> List[Tuple[str, str]]:
    """``(variable, path)`` for each CA variable that is set and not empty, in load order."""
    return [(name, environ[name]) for name in CA_VARIABLES if environ.get(name)]


def trust_context(environ: Optional[Mapping[str, str]] = None) -> ssl.SSLContext:
    """A client context that checks certificates and host names against every trusted CA.

    ``environ`` defaults to ``os.environ``. A variable naming a path that
    cannot be loaded is logged as an error (with the variable, not the
    file's contents) and left out; the rest still count.
    """
    env = os.environ if environ is None else environ
    # create_default_context() loads the system store through OpenSSL's
    # default paths, which honour SSL_CERT_FILE / SSL_CERT_DIR on CPython's
    # OpenSSL; they are loaded below too, so that a build whose defaults
    # ignore them (another OpenSSL, PyPy) trusts the same.
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=DEFAULT_CA_BUNDLE_PATH)
    except (OSError, ssl.SSLError) as exc:
        log.error("certifi's CA bundle could not be loaded from %s: %s", DEFAULT_CA_BUNDLE_PATH, exc)
    for name, path in ca_locations(env):
        try:
            if os.path.isdir(path):
                context.load_verify_locations(capath=path)
            else:
                context.load_verify_locations(cafile=path)
        except (OSError, ssl.SSLError) as exc:
            log.error("%s=%s: no CA certificate could be loaded from it (%s); it is not trusted",
                      name, path, getattr(exc, "strerror", None) or exc)
    return context


def is_verification_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a certificate or host name that did not verify."""
    seen = 0
    current: Optional[BaseException] = exc
    while current is not None and seen < 8:
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        if type(current).__name__ == "CertificateError":  # urllib3's own host name check
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False


__all__ = ["CA_VARIABLES", "HOW_TO_TRUST", "ca_locations", "trust_context", "is_verification_failure"]
