"""The one user-error type.

Library code raises :class:`OmniError` with a message that says what was
wrong, where (file, field, arm, column) and what to do about it. The CLI and
the Prefect flow catch it once, at their boundary, and show the message alone:
no traceback reaches the user for a mistake the user can fix.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


class OmniError(Exception):
    """A problem the user can fix; ``str(err)`` is the whole message."""


class SpecError(OmniError):
    """A sweep spec that cannot be loaded or is invalid."""


def causes(error: BaseException):
    """``error`` and what caused it, outermost first (each once)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def disk_full(error: BaseException) -> str | None:
    """``disk full writing PATH`` when ``error`` (or a cause) is ENOSPC/EDQUOT;
    else None. A full results disk is not a bad run: the run is not stored,
    and ``--resume`` runs it once there is space."""
    import errno

    for link in causes(error):
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"disk full writing {link.filename or 'the results directory'}"
    return None


@contextmanager
def naming(path) -> Iterator[None]:
    """An OSError raised inside names ``path``: a file's close, or pyarrow's
    writer, reports ENOSPC with no file name, and "disk full writing the
    results directory" would leave the user to guess which disk."""
    try:
        yield
    except OSError as error:
        if error.filename is None and error.errno:
            raise OSError(error.errno, os.strerror(error.errno), str(path)) from error
        raise
