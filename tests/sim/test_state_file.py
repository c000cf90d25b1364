"""The shared state file: one layout on both sides, and a broken file is replaced, not fatal."""
import ctypes
import json
import signal
from pathlib import Path

import pytest

from hami_common.cmirror import compare_layout
from hami_sim.gpu import state

ROOT = Path(__file__).resolve().parents[2]
MIRRORS = {state.SimProc: "sim_proc", state.SimBusy: "sim_busy", state.SimXid: "sim_xid",
           state.SimDevice: "sim_device", state.SimHeader: "sim_header",
           state.SimState: "sim_state", state.SimMigCi: "sim_mig_ci",
           state.SimMigGi: "sim_mig_gi", state.SimMigGpu: "sim_mig_gpu"}


@pytest.mark.parametrize("struct, field, value", state.LAYOUT,
                         ids=[f"{s.__name__}.{f or 'size'}" for s, f, _ in state.LAYOUT])
def test_python_mirror_has_the_asserted_layout(struct, field, value):
    assert (getattr(struct, field).offset if field else ctypes.sizeof(struct)) == value


def test_every_field_matches_the_c_header(tmp_path):
    """Compiles a probe against sim_state.h printing each struct's size and field offsets."""
    from_c, from_python = compare_layout(MIRRORS, "sim_state.h", [ROOT / "c/simgpu"], tmp_path)
    assert from_c == from_python


ALLOC = '''
    ctx = context(0)
    p = ok(cu.cuMemAlloc(1024**2))
    say(used=used())
'''


@pytest.mark.parametrize("damage, reason", [
    (lambda p: p.write_bytes(b"garbage"), "has size 7"),
    (lambda p: p.write_bytes(b"\0" * p.stat().st_size), "has a bad magic number"),
], ids=["truncated", "zeroed"])
def test_a_corrupt_state_file_is_reported_once_and_rebuilt(sim, damage, reason):
    sim.run(ALLOC)
    path = sim.state_dir / state.STATE_FILE
    damage(path)
    out, err = sim.run(ALLOC)
    assert out == [{"used": 2 * 1024**2}]  # 1 MiB shows as one 2 MiB page
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith(f"hami-sim: state file {path} {reason}")
    assert lines[0].endswith("; rebuilding it")
    assert state.read_state(path).header.device_count == 2


def test_a_state_file_for_other_gpus_is_replaced(make_sim):
    first = make_sim("1g,1g", "shared")
    first.run(ALLOC)
    second = make_sim("3g", "shared")
    out, err = second.run(ALLOC)
    assert "built for another HAMI_SIM_GPUS" in err
    snapshot = state.read_state(second.state_dir / state.STATE_FILE)
    assert snapshot.header.device_count == 1 and snapshot.devices[0].total_bytes == 3 << 30


def test_reading_a_missing_or_foreign_file_is_a_clear_error(tmp_path):
    with pytest.raises(state.StateError, match="cannot read"):
        state.read_state(tmp_path / "nothing")
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"\1" * ctypes.sizeof(state.SimState))
    with pytest.raises(state.StateError, match=f"not a version-{state.VERSION}"):
        state.read_state(foreign)


def test_a_process_killed_while_holding_the_lock_blocks_nobody(sim):
    sim.run(ALLOC)
    holder = sim.spawn(f'''
        import mmap
        f = open({str(sim.state_dir / state.STATE_FILE)!r}, "r+b")
        m = mmap.mmap(f.fileno(), 0)
        buf = (ctypes.c_char * len(m)).from_buffer(m)
        lock = ctypes.c_void_p(ctypes.addressof(buf) + {state.SimHeader.lock.offset})
        say(locked=ctypes.CDLL(None).pthread_mutex_lock(lock))
        time.sleep(60)
    ''')
    assert json.loads(holder.stdout.readline()) == {"locked": 0}
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    out, _ = sim.run(ALLOC, timeout=20)  # recovers the robust mutex instead of hanging
    assert out == [{"used": 2 * 1024**2}]  # 1 MiB shows as one 2 MiB page
