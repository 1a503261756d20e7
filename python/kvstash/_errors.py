"""Exceptions of kvstash: one class per code of the native Status (common/include/kvstash/status.h).

Every failure the native code reports is raised as the subclass of `KvstashError` of
its code; `retryable` is True for the codes where the same request may succeed later
(Unavailable, ResourceExhausted, DeadlineExceeded), as Status::IsRetryable says.
"""

from __future__ import annotations


class KvstashError(Exception):
    """A failed kvstash operation.

    Attributes:
        code: the Status code name, e.g. "NotFound", "Corruption".
        retryable: True when retrying the same request later may succeed.
        message: the human-readable message of the Status.
    """

    code: str = "Unknown"
    retryable: bool = False

    def __init__(self, message: str = "", code: str | None = None, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self):  # picklable (multiprocessing workers re-raise them)
        return (error_from_status, (self.code, self.message))


class NotFoundError(KvstashError):
    """Key or entry absent (a cache miss), or a PUT whose parent is not stored."""

    code = "NotFound"


class CorruptionError(KvstashError):
    """Bytes failed a checksum or a format rule (a damaged payload)."""

    code = "Corruption"


class InvalidArgumentError(KvstashError):
    """The caller passed a bad shape, dtype, size or option."""

    code = "InvalidArgument"


class StorageIOError(KvstashError):
    """The OS or storage engine failed (Status IOError; named so as not to shadow
    Python's builtin IOError)."""

    code = "IOError"


class UnavailableError(KvstashError):
    """A server is down or unreachable, or the client is closed. Retryable."""

    code = "Unavailable"
    retryable = True


class MismatchError(KvstashError):
    """An artifact, predictor, model or layout digest differs from the expected one."""

    code = "Mismatch"


class ResourceExhaustedError(KvstashError):
    """A budget or limit was hit. Retryable."""

    code = "ResourceExhausted"
    retryable = True


class DeadlineExceededError(KvstashError):
    """The call's deadline passed. Retryable."""

    code = "DeadlineExceeded"
    retryable = True


class NotSupportedError(KvstashError):
    """A valid request this build or server version cannot serve."""

    code = "NotSupported"


class PermissionDeniedError(KvstashError):
    """The tenant credential was rejected."""

    code = "PermissionDenied"


class InternalError(KvstashError):
    """A bug: an invariant of kvstash does not hold."""

    code = "Internal"


ERROR_CLASSES: dict[str, type[KvstashError]] = {
    cls.code: cls
    for cls in (
        NotFoundError,
        CorruptionError,
        InvalidArgumentError,
        StorageIOError,
        UnavailableError,
        MismatchError,
        ResourceExhaustedError,
        DeadlineExceededError,
        NotSupportedError,
        PermissionDeniedError,
        InternalError,
    )
}


def error_from_status(code: str, message: str) -> KvstashError:
    """The exception instance for a Status code name and message (unknown codes give a
    plain KvstashError carrying that code)."""
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return KvstashError(message, code=code, retryable=False)
    return cls(message)
