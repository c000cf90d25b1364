"""HAMi's legacy register format: `uuid,count,devmem,devcore,type,numa,health[,index,mode]:` repeated.

Isolated here (the one positional-CSV codec of the project) so that nothing else has to know
about its seven-or-nine fields.
"""
from hami_common.errors import HamiFormatError
from hami_common.node_register import DeviceInfo


def _parse_bool(text: str, uuid: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise HamiFormatError(f"legacy register entry {uuid!r}: health {text!r} is not true/false")


def _parse_int(text: str, field: str, uuid: str) -> int:
    try:
        return int(text.strip())
    except ValueError as e:
        raise HamiFormatError(f"legacy register entry {uuid!r}: {field} {text!r} is not an "
                              "integer") from e


def decode(value: str) -> list:
    """Devices from the legacy colon-separated form."""
    devices = []
    for position, entry in enumerate(e for e in value.strip().split(":") if e.strip()):
        fields = entry.split(",")
        if len(fields) not in (7, 9):
            raise HamiFormatError(f"legacy register entry {entry!r} has {len(fields)} fields, "
                                  "expected 7 or 9 (uuid,count,devmem,devcore,type,numa,health"
                                  "[,index,mode])")
        uuid = fields[0].strip()
        devices.append(DeviceInfo(
            id=uuid, count=_parse_int(fields[1], "count", uuid),
            devmem=_parse_int(fields[2], "devmem", uuid),
            devcore=_parse_int(fields[3], "devcore", uuid), type=fields[4].strip(),
            numa=_parse_int(fields[5], "numa", uuid), health=_parse_bool(fields[6], uuid),
            index=_parse_int(fields[7], "index", uuid) if len(fields) == 9 else position,
            mode=fields[8].strip() if len(fields) == 9 else "hami-core"))
    return devices


def encode(devices) -> str:
    """The legacy form of a device list (nine fields per device)."""
    return "".join(f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},"
                   f"{'true' if d.health else 'false'},{d.index},{d.mode}:" for d in devices)
