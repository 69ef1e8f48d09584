"""The one user-error type.

Library code raises :class:`OmniError` with a message that says what was
wrong, where (file, field, arm, column) and what to do about it. The CLI and
the Prefect flow catch it once, at their boundary, and show the message alone:
no traceback reaches the user for a mistake the user can fix.
"""


class OmniError(Exception):
    """A problem the user can fix; ``str(err)`` is the whole message."""


class SpecError(OmniError):
    """A sweep spec that cannot be loaded or is invalid."""
