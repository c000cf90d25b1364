"""Kubernetes resource quantities: "500m", "2", "1.5Gi", "3e3".

Exact arithmetic (Fraction) so that "0.1" + "0.2" CPU is exactly 300 millicores.
"""
import math
import re
from fractions import Fraction
from functools import lru_cache

from hami_common.errors import HamiFormatError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
MIB = 2**20
_PER_MIB = Fraction(1, MIB)


def parse_quantity(value) -> Fraction:
    """The exact value of a quantity given as a string, int or float; HamiFormatError if malformed."""
    if isinstance(value, bool):
        raise HamiFormatError(f"quantity {value!r} is a boolean, expected a number like '2' or '500m'")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    text = str(value).strip()
    match = _PATTERN.match(text)
    if not match:
        raise HamiFormatError(f"quantity {value!r} is not a Kubernetes quantity "
                              "(expected e.g. '2', '500m', '1.5Gi')")
    number, exponent, suffix = match.groups()
    result = Fraction(number)
    if exponent:
        result *= Fraction(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        result *= _BINARY[suffix]
    else:
        result *= _DECIMAL[suffix or ""]
    return result


def has_binary_unit(value) -> bool:
    """Whether a quantity string carries a binary suffix ("3Gi", "512Mi"). Decimal suffixes and
    exponents are only another spelling of a plain number: the API server stores a limit of
    3000 as "3k" (its canonical form), so "3k" must read as 3000."""
    return isinstance(value, str) and value.strip()[-2:] in _BINARY


def _ceil(value, scale) -> int:
    """The quantity times `scale`, rounded up (exactly: the product is a Fraction)."""
    return math.ceil(parse_quantity(value) * scale)


# Pods repeat a few quantity strings; every watch event and filter reads them, so cache them.
@lru_cache(maxsize=4096)
def _cpu_millis(value) -> int:
    return _ceil(value, 1000)


@lru_cache(maxsize=4096)
def _memory_mib(value) -> int:
    return _ceil(value, _PER_MIB)


def cpu_millis(value) -> int:
    """CPU quantity in millicores, rounded up the way the API server does ("0.0001" -> 1m)."""
    # Only strings are cached: True and 1 are equal keys, but a boolean is no quantity.
    return _cpu_millis(value) if isinstance(value, str) else _ceil(value, 1000)


def memory_mib(value) -> int:
    """Memory quantity (bytes with an optional suffix) in MiB, rounded up."""
    return _memory_mib(value) if isinstance(value, str) else _ceil(value, _PER_MIB)
