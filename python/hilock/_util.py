"""Argument checks shared by the lock classes."""
from __future__ import annotations

import math
import os
import ssl
import threading
from typing import Any, Literal, NoReturn, Optional, Tuple, Union

from .errors import InvalidArgument

TTL_MAX_MS = 1 << 40
NAME_MAX = 1024

Name = Union[str, bytes, bytearray, memoryview]


def name_bytes(name: Name) -> bytes:
    """A lock name as bytes (str is UTF-8 encoded)."""
    if isinstance(name, str):
        return name.encode("utf-8", "surrogatepass")
    if isinstance(name, (bytes, bytearray, memoryview)):
        return bytes(name)
    raise InvalidArgument(f"lock name must be str or bytes, not {type(name).__name__}")


def redact_url(url: str) -> str:
    """``url`` as messages, reprs and attributes show it: the password of its
    userinfo and the value of every query parameter whose name ends in
    ``password`` as ``***`` (``redis://user:***@host/0``), whatever the
    scheme; the C library masks the URLs of its messages alike."""
    q = url.find("?")
    at = url.rfind("@", 0, len(url) if q < 0 else q)  # a password may hold '@'
    shown = ""
    if at >= 0:
        # The userinfo starts after the first "//" (or, the scheme mistyped,
        # the first '/'), else at the start.
        slash = url.find("/", 0, at)
        start = (0 if slash < 0 else
                 slash + 2 if url.startswith("/", slash + 1) and slash + 1 < at else
                 slash + 1)
        user, colon, password = url[start:at].partition(":")
        shown = url[:start] + (user + ":" + ("***" if password else "") if colon else
                               "***" if user else "")
        url = url[at:]
    head, question, query = url.partition("?")
    shown += head
    if question:
        params = []
        for param in query.split("&"):
            key, eq, _ = param.partition("=")
            params.append(key + "=***" if eq and key.lower().endswith("password")
                          else param)
        shown += "?" + "&".join(params)
    return shown


PREFIX_MAX = 64


def prefix_bytes(prefix: str) -> bytes:
    """A key prefix (``Client(prefix=...)``) as bytes, checked: 1..64 bytes,
    no braces (the lock name after it is the keys' hash tag), no NUL."""
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__}")
    raw = prefix.encode("utf-8", "surrogatepass")
    if not 1 <= len(raw) <= PREFIX_MAX or any(c in raw for c in b"{}\0"):
        raise InvalidArgument(f"prefix must be 1..{PREFIX_MAX} bytes without '{{', '}}' "
                              f"or NUL, got {prefix!r}")
    return raw


#: The key layouts of other libraries a lock can share (``compat=``).
Compat = Literal["redisson"]
# The expiring lock's: redis-py's layout (``client.lock(name, compat="redis-py")``).
RedisPyCompat = Literal["redis-py"]


def check_compat(compat: Optional[str]) -> bool:
    """Whether ``compat`` asks for Redisson's layout (None: hilock's own)."""
    if compat is None:
        return False
    if compat == "redisson":
        return True
    raise InvalidArgument(f"compat must be None or 'redisson', got {compat!r}")


def check_redis_py(compat: Optional[str]) -> bool:
    """Whether ``compat`` asks for redis-py's layout (None: hilock's own)."""
    if compat is None:
        return False
    if compat == "redis-py":
        return True
    raise InvalidArgument(f"compat must be None or 'redis-py', got {compat!r}")


def delay_to_ms(value: float) -> int:
    """A lock delay in seconds (0: none) to whole ms (rounded up)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0
    return seconds_to_ms(value, "lock_delay")


def no_lock_delay(value: float, kind: str) -> None:
    """Refuse a lock delay on a lock type that has none (0 passes)."""
    if delay_to_ms(value) != 0:
        raise InvalidArgument(f"{kind} has no lock delay (lock_delay must be 0, got {value!r}); "
                              "lock(), lease(), fair_lock(), multi_lock(), sequential_lock(), "
                              "rlock() and rwlock() have it")


def seconds_to_ms(value: float, what: str) -> int:
    """Positive float seconds to whole ms (rounded up), within TTL_MAX_MS."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds, not {type(value).__name__}")
    # An int may be past any float (isnan would overflow), a float past
    # any ms (value * 1000 is then infinite): compare before converting.
    if (isinstance(value, float) and (math.isnan(value) or math.isinf(value))) or value <= 0:
        raise InvalidArgument(f"{what} must be a finite number of seconds > 0, got {value!r}")
    ms = math.ceil(value * 1000) if value <= TTL_MAX_MS / 1000 else TTL_MAX_MS + 1
    if ms > TTL_MAX_MS:
        raise InvalidArgument(f"{what} of {value!r} s is above the limit of {TTL_MAX_MS // 1000} s")
    return ms


def wait_seconds(value: Optional[float], what: str = "timeout") -> Optional[float]:
    """A wait: None for no limit, else a finite number >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds or None")
    if (isinstance(value, float) and math.isnan(value)) or value < 0:
        raise InvalidArgument(f"{what} must be >= 0 seconds or None, got {value!r}")
    if value > threading.TIMEOUT_MAX:  # inf included
        return None  # beyond any wait a thread can make: no limit
    return float(value)


PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

TLS_OPTIONS = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_password",
               "ssl_cert_reqs", "ssl_check_hostname", "ssl_server_name")

_CERT_REQS = {"required": 0, "optional": 1, "none": 2}

# The TLS arguments of py_client_new and py_redlock_new: ca_certs, ca_path,
# certfile, keyfile, password, cert_reqs, check_hostname, server_name.
TlsArgs = Tuple[Optional[bytes], Optional[bytes], Optional[bytes], Optional[bytes],
                Optional[bytes], int, int, Optional[bytes]]


def _tls_path(value: Any, what: str) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, (str, bytes, os.PathLike)):
        b = os.fsencode(value)
        if b and b"\0" not in b:
            return b
    raise InvalidArgument(f"{what} must be a file path (str or os.PathLike), got {value!r}")


def tls_args(ssl_ca_certs: Any = None, ssl_ca_path: Any = None, ssl_certfile: Any = None,
             ssl_keyfile: Any = None, ssl_password: Any = None,
             ssl_cert_reqs: Any = "required", ssl_check_hostname: Any = True,
             ssl_server_name: Optional[str] = None) -> TlsArgs:
    """The TLS keyword arguments (redis-py's names and values) as the C
    options take them."""
    if ssl_cert_reqs is None:  # redis-py: None means no verification
        reqs = 2
    elif isinstance(ssl_cert_reqs, str) and ssl_cert_reqs.lower() in _CERT_REQS:
        reqs = _CERT_REQS[ssl_cert_reqs.lower()]
    elif isinstance(ssl_cert_reqs, ssl.VerifyMode):
        reqs = {ssl.CERT_REQUIRED: 0, ssl.CERT_OPTIONAL: 1, ssl.CERT_NONE: 2}[ssl_cert_reqs]
    else:
        raise InvalidArgument("ssl_cert_reqs must be 'required', 'optional', 'none' or an "
                              f"ssl.VerifyMode, got {ssl_cert_reqs!r}")
    if not isinstance(ssl_check_hostname, bool):
        raise InvalidArgument(f"ssl_check_hostname must be a bool, got {ssl_check_hostname!r}")
    password: Optional[bytes] = None
    if ssl_password is not None:
        if isinstance(ssl_password, str):
            password = ssl_password.encode()
        elif isinstance(ssl_password, bytes):
            password = ssl_password
        else:
            raise InvalidArgument("ssl_password must be str or bytes")
        if b"\0" in password:
            raise InvalidArgument("ssl_password must not hold NUL characters")
    server_name: Optional[bytes] = None
    if ssl_server_name is not None:
        if not isinstance(ssl_server_name, str) or not ssl_server_name or "\0" in ssl_server_name:
            raise InvalidArgument("ssl_server_name must be a non-empty str")
        server_name = ssl_server_name.encode()
    return (_tls_path(ssl_ca_certs, "ssl_ca_certs"), _tls_path(ssl_ca_path, "ssl_ca_path"),
            _tls_path(ssl_certfile, "ssl_certfile"), _tls_path(ssl_keyfile, "ssl_keyfile"),
            password, reqs, int(ssl_check_hostname), server_name)


LOCK_COPY = "hilock locks cannot be pickled: a lock object stands for its holder"


class Uncopyable:
    """Refuses copy.copy, copy.deepcopy and pickling, saying why: a copy of
    a client or a lock would be a second handle on one pool or one holder."""

    _copy_refusal = LOCK_COPY
    _pickle_refusal = LOCK_COPY

    def __copy__(self) -> NoReturn:
        raise TypeError(self._copy_refusal)

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise TypeError(self._copy_refusal)

    def __reduce__(self) -> NoReturn:
        raise TypeError(self._pickle_refusal)
