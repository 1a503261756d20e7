"""Every native Status code becomes its KvstashError subclass with code and retryable."""

from __future__ import annotations

import pickle

import pytest

import kvstash
from kvstash import _native

EXPECTED = {
    "NotFound": (kvstash.NotFoundError, False),
    "Corruption": (kvstash.CorruptionError, False),
    "InvalidArgument": (kvstash.InvalidArgumentError, False),
    "IOError": (kvstash.StorageIOError, False),
    "Unavailable": (kvstash.UnavailableError, True),
    "Mismatch": (kvstash.MismatchError, False),
    "ResourceExhausted": (kvstash.ResourceExhaustedError, True),
    "DeadlineExceeded": (kvstash.DeadlineExceededError, True),
    "NotSupported": (kvstash.NotSupportedError, False),
    "PermissionDenied": (kvstash.PermissionDeniedError, False),
    "Internal": (kvstash.InternalError, False),
}


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_native_status_raises_its_class(code):
    cls, retryable = EXPECTED[code]
    with pytest.raises(cls) as e:
        _native._raise_status(code, "boom")
    err = e.value
    assert isinstance(err, kvstash.KvstashError)
    assert (err.code, err.retryable, err.message) == (code, retryable, "boom")
    assert str(err) == f"{code}: boom"
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls and again.message == "boom"


def test_classes_cover_every_code():
    assert set(kvstash.ERROR_CLASSES) == set(EXPECTED)
    assert not issubclass(kvstash.StorageIOError, OSError)  # no clash with builtin IOError
    assert kvstash.error_from_status("Nope", "m").code == "Nope"
