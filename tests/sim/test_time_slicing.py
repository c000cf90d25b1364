"""Time on the simulated device (c/simgpu/timeline.c): processes take turns in time slices,
streams of one process overlap when their blocks fit, events bracket others' slices, and a
wait spins unless the event or context was made for blocking sync."""
import json

from hami_sim.gpu.timeline import BusyRecorder

# Queues `ms` of one kernel (8 SMs: one block per SM fills the device) between two events;
# prints the events' elapsed time once done, and when (host monotonic clock, shared by all
# processes) it began and finished queueing the events and the kernel: an event on an idle
# stream is stamped at once, so a process descheduled between those calls adds that wait to
# its elapsed time, as on a real GPU.
BRACKETED = '''
    ok(cu.cuInit(0))
    ctx = ok(cu.cuCtxCreate(None, 4, ok(cu.cuDeviceGet(0))))   # CU_CTX_SCHED_BLOCKING_SYNC
    f, stream = spin_function(), ok(cu.cuStreamCreate(1))
    start, end = ok(cu.cuEventCreate(1)), ok(cu.cuEventCreate(1))
    say(ready=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    ok(cu.cuEventRecord(start, stream))
    spin(f, {ns}, stream, blocks=8)
    ok(cu.cuEventRecord(end, stream))
    queued = time.monotonic()
    ok(cu.cuEventSynchronize(end))
    say(ms=ok(cu.cuEventElapsedTime(start, end)), t0=t0, queued=queued)
'''


def whole_slices(lengths_ms, slice_ms):
    """Every length is one or more whole slices (a turn the other process gave back at once,
    having only an event to stamp, joins two of one process's slices into one interval)."""
    return lengths_ms and all(x >= slice_ms * 0.97 and abs(x / slice_ms - round(x / slice_ms))
                              < 0.03 for x in lengths_ms)


def inner_turns(intervals, pids):
    """The lengths (ms) and owners of the busy intervals between each process's first and last:
    those may hold a partial slice (it ran alone, or its kernel ended mid-slice)."""
    inner = [iv for p in pids for iv in [iv for iv in intervals if iv[2] == p][1:-1]]
    return [(e - s) / 1e6 for s, e, _ in inner], {p for _, _, p in inner}


def run_two(sim, ns, env=None):
    """Two processes queue one kernel each at the same moment; their event times and the
    device's busy intervals."""
    kids = [sim.spawn(BRACKETED.format(ns=ns), env=env, stdin=__import__("subprocess").PIPE)
            for _ in range(2)]
    for k in kids:
        assert json.loads(k.stdout.readline()) == {"ready": True}
    recorder = BusyRecorder(sim.state_dir, [0])
    for k in kids:
        k.stdin.write("go\n")
        k.stdin.flush()
    out = [json.loads(k.stdout.readline()) for k in kids]
    for k in kids:
        k.wait(timeout=10)
    recorder.poll()
    return out, sorted(recorder.intervals[0].values()), [k.pid for k in kids]


def test_two_processes_take_turns_in_2ms_slices_and_events_include_the_others_turns(sim):
    out, intervals, pids = run_two(sim, 20_000_000)
    # Each 20 ms kernel shares the device with the other: about 40 ms between its events
    # (more for the one whose kernel reached the device late on a busy machine: its start
    # event is stamped at its first turn, and the other's slices count from there). A host
    # descheduled while it queues moves the bounds: its own elapsed time grows by the time it
    # took to queue (a CI run saw 55 ms), and until the other has queued its kernel, it runs
    # alone (less shared).
    for mine, other in ((out[0], out[1]), (out[1], out[0])):
        queueing = (mine["queued"] - mine["t0"]) * 1e3
        alone = max(0.0, (other["queued"] - mine["t0"]) * 1e3)
        assert 30 - alone <= mine["ms"] <= 52 + queueing, out
    both = [(s, e, p) for s, e, p in intervals if p in pids]
    lengths, owners = inner_turns(both, pids)
    assert whole_slices(lengths, 2.0) and min(lengths) < 2.1, lengths
    assert owners == set(pids)  # alternating owners
    assert sum(e - s for s, e, _ in both) == 40_000_000  # no time lost or invented


def test_the_time_slice_is_configurable(sim):
    env = dict(sim.env, HAMI_SIM_TIMESLICE="5ms")
    _, intervals, pids = run_two(sim, 20_000_000, env)
    inner, _ = inner_turns(intervals, pids)
    assert whole_slices(inner, 5.0) and min(inner) < 5.1, inner


def test_streams_of_one_process_overlap_when_their_blocks_fit(sim):
    out, _ = sim.run('''
        ok(cu.cuInit(0))
        ctx = ok(cu.cuCtxCreate(None, 4, ok(cu.cuDeviceGet(0))))    # 8 SMs
        f = spin_function()
        a, b = ok(cu.cuStreamCreate(1)), ok(cu.cuStreamCreate(1))
        took = {4: [], 8: []}
        for _ in range(3):
            for blocks in (4, 8):
                t0 = time.monotonic()
                spin(f, 30_000_000, a, blocks=blocks); spin(f, 30_000_000, b, blocks=blocks)
                ok(cu.cuStreamSynchronize(a)); ok(cu.cuStreamSynchronize(b))
                took[blocks].append((time.monotonic() - t0) * 1e3)
        say(ms=[min(took[4]), min(took[8])])
    ''')
    fit, full = out[0]["ms"]
    # 4 + 4 blocks on 8 SMs run side by side (30 ms), 8 + 8 one after the other (60 ms); wall
    # time on a loaded machine can only add to both, so the least of three tries counts (one
    # try alone took 54 ms for the side-by-side pair in a fresh-clone run).
    assert 29 <= fit < 0.75 * full and full >= 59, (fit, full)


def test_a_wait_spins_unless_made_for_blocking_sync(sim):
    out, _ = sim.run('''
        ctx = context(0)
        f, stream = spin_function(), ok(cu.cuStreamCreate(1))
        cpu = {}
        for name, flags in (("spin", 0), ("blocking", 1)):
            ev = ok(cu.cuEventCreate(flags))
            spin(f, 300_000_000, stream)
            ok(cu.cuEventRecord(ev, stream))
            c0, t0 = time.process_time(), time.monotonic()
            ok(cu.cuEventSynchronize(ev))
            cpu[name] = (time.process_time() - c0) / (time.monotonic() - t0)
        say(**cpu)
    ''')
    # Spinning yields to other runnable threads, so on a busy 2-core box it gets what the
    # scheduler leaves it; a sleeping wait gets next to nothing either way.
    assert out[0]["spin"] > 0.1 and out[0]["spin"] > 5 * out[0]["blocking"], out
    assert out[0]["blocking"] < 0.05, out
