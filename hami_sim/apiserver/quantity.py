"""Resource quantities in the API server's canonical form, as the real server stores them.

The real server re-spells every quantity it stores: 3000 -> "3k", "2048Mi" -> "2Gi",
"1.5" -> "1500m", 1e3 -> "1e3". Clients (and our request parser) must cope with that, so the
double does it too. The spelling keeps the input's family: binary suffixes stay binary while
the value is a whole number of bytes, exponents stay exponents, the rest is decimal SI.
"""
import math
from fractions import Fraction

from hami_common.quantity import parse_quantity

_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-3: "n", -2: "u", -1: "m", 0: "", 1: "k", 2: "M", 3: "G", 4: "T", 5: "P", 6: "E"}


def canonical(value) -> str:
    """The canonical spelling of a quantity; HamiFormatError when it is not one."""
    amount = parse_quantity(value)
    text = str(value).strip()
    if text[-2:] in _BINARY[1:] and amount.denominator == 1:
        return _binary(int(amount))
    mantissa, power = _decimal(amount)
    if "e" in text.lower() and power:
        return f"{mantissa}e{3 * power}"
    return f"{mantissa}{_DECIMAL[power]}"


def _binary(amount: int) -> str:
    power = 0
    while power < len(_BINARY) - 1 and amount and amount % 1024 == 0:
        amount //= 1024
        power += 1
    return f"{amount}{_BINARY[power]}"


def _decimal(amount: Fraction) -> tuple:
    """(integer mantissa, power of 1000) with the largest power that keeps the mantissa whole;
    finer than nano rounds up to nano, as the real server does."""
    if amount == 0:
        return 0, 0
    for power in range(6, -4, -1):
        scaled = amount / Fraction(1000) ** power
        if scaled.denominator == 1:
            return scaled.numerator, power
    nanos = amount * 10**9
    return math.ceil(nanos), -3      # exact: nanos is a Fraction
