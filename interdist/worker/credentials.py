"""TLS credentials that never touch a file: PEM contents behind ``/proc/self/fd/N`` of a memfd.

Dask's ``Security`` holds a certificate or key either as a path or as PEM contents. Given contents,
it writes them into a fresh ``tempfile.TemporaryDirectory`` each time it builds an SSL context
(Python's ``ssl`` loads a certificate chain only from a path): a review counted 8 such files per
embedded cluster start, the private key among them. Here each distinct certificate and key goes into
an anonymous memory file instead (``os.memfd_create``: in no directory, on no disk), and the
``Security`` gets the path ``/proc/self/fd/N``, which names it in the process's own descriptor table
and which only this process (and root) can open. The CA certificate stays PEM contents: ``ssl`` takes
those from memory (``cadata``).

:func:`in_memory` is used by the notebook process for its embedded cluster (``cluster.py``) and by
each embedded worker for the credentials it reads from its socket pair (``worker/process.py``). The
descriptors stay open as long as the returned ``Security`` is used (:func:`close` closes them; the
pool closes them with the cluster; a worker's close with its process). Where ``os.memfd_create`` or
``/proc/self/fd`` is missing (macOS, Windows), :func:`in_memory` returns the ``Security`` as given
and Dask's temporary files are what happens (a 0700 directory, removed right after).
"""

from __future__ import annotations

import logging
import os
import sys
import weakref
from typing import Any

from distributed.security import Security

logger = logging.getLogger("interdist")

#: The fields of a ``Security`` that may hold a certificate or key (PEM contents or a path).
CERT_FIELDS = (
    "tls_client_cert",
    "tls_client_key",
    "tls_scheduler_cert",
    "tls_scheduler_key",
    "tls_worker_cert",
    "tls_worker_key",
)


class MemorySecurity(Security):
    """A ``Security`` whose certificates and keys are memfds (``/proc/self/fd/N``) of this process.

    ``pem`` keeps each such field's PEM contents (what a worker process is sent: the path means
    nothing in another process); ``close()`` closes the descriptors."""

    pem: dict[str, str]
    _finalizer: Any

    def close(self) -> None:
        self._finalizer()


def available() -> bool:
    """Whether this platform has anonymous memory files that ``ssl`` can open by path."""
    return hasattr(os, "memfd_create") and sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


def _fields(security: Any) -> dict[str, Any]:
    return {f: getattr(security, f, None) for f in Security.__slots__}


def in_memory(security: Any) -> Any:
    """``security`` with every certificate and key held as PEM contents moved into a memfd of this
    process (a new ``MemorySecurity``); ``security`` itself when none is, when it is None, or where
    memfds are missing (see the module's docstring)."""
    if security is None or isinstance(security, MemorySecurity):
        return security
    fields = _fields(security)
    held = {f: v for f in CERT_FIELDS if isinstance(v := fields.get(f), str) and "\n" in v}
    if not held:
        return security
    if not available():
        logger.debug("interdist: no memfd_create here: Dask writes the TLS credentials to temporary files")
        return security
    fds: list[int] = []
    by_contents: dict[str, str] = {}
    try:
        for pem in dict.fromkeys(held.values()):
            fd = os.memfd_create("interdist-tls", os.MFD_CLOEXEC)  # not inherited by subprocesses
            fds.append(fd)
            data = pem.encode()
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            by_contents[pem] = f"/proc/self/fd/{fd}"
    except OSError as e:
        for fd in fds:
            os.close(fd)
        logger.debug("interdist: memfd_create failed (%s): Dask writes the TLS credentials to temporary files", e)
        return security
    kwargs = {**fields, **{f: by_contents[v] for f, v in held.items()}}
    out = MemorySecurity(**kwargs)  # type: ignore[no-untyped-call]  # distributed is untyped
    out.pem = dict(held)
    out._finalizer = weakref.finalize(out, _close_all, tuple(fds))
    return out


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def close(security: Any) -> None:
    """Close the memfds of a ``Security`` made by :func:`in_memory` (nothing for any other)."""
    if isinstance(security, MemorySecurity):
        security.close()


def contents(security: Any, field: str) -> Any:
    """What ``security`` holds in ``field``, PEM contents in place of this process's memfd paths."""
    pem = getattr(security, "pem", None)
    if isinstance(security, MemorySecurity) and isinstance(pem, dict) and field in pem:
        return pem[field]
    return getattr(security, field, None)
