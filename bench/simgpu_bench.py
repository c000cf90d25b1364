"""Benchmark of the simulated GPU: the cost of one kernel launch inside the simulator (a C
loop calling cuLaunchKernel, no Python in the way) and the accuracy of its device timeline.

References measured in the same run: a cheap driver call (cuCtxGetDevice, a context lookup
through the same dlsym'd path) for the launch, the ideal 100 ms for the 20 x 5 ms kernels.

usage: python bench/simgpu_bench.py [--launches N]
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import print_machine, ratio
from hami_sim.gpu import sim_env

LOOP = r'''
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef int (*fn_t)();
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    fn_t init = (fn_t)dlsym(lib, "cuInit"), get = (fn_t)dlsym(lib, "cuDeviceGet"),
         create = (fn_t)dlsym(lib, "cuCtxCreate_v2"), load = (fn_t)dlsym(lib, "cuModuleLoadData"),
         func = (fn_t)dlsym(lib, "cuModuleGetFunction"), launch = (fn_t)dlsym(lib, "cuLaunchKernel"),
         sync = (fn_t)dlsym(lib, "cuCtxSynchronize"),
         ctxdev = (fn_t)dlsym(lib, "cuCtxGetDevice");
    int dev; void *ctx, *mod, *f; uint64_t ns = 0; void *params[] = {&ns};
    if (init(0) || get(&dev, 0) || create(&ctx, 0, dev) || load(&mod, "x") || func(&f, mod, "spin"))
        return 2;
    double t0 = now();
    for (long i = 0; i < n; i++)
        launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    double t1 = now();
    int v;
    double r0 = now();
    for (long i = 0; i < n; i++)
        ctxdev(&v);
    double r1 = now();
    ns = 5000000;
    double t2 = now();
    for (int i = 0; i < 20; i++)
        launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    sync();
    double t3 = now();
    printf("%.1f %.3f %.2f\n", (t1 - t0) / n * 1e9, (t3 - t2) * 1e3, (r1 - r0) / n * 1e9);
    return 0;
}
'''


def main() -> int:
    """Builds the C loop, runs it against the simulator, prints the figures."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--launches", type=int, default=1_000_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "loop.c", Path(tmp) / "loop"
        src.write_text(LOOP)
        subprocess.run(["cc", "-O2", str(src), "-o", str(exe), "-ldl"], check=True)
        env = sim_env(gpus="16g/108", state_dir=Path(tmp) / "state")
        out = subprocess.run([str(exe), str(args.launches)], env=env, capture_output=True,
                             text=True, timeout=300)
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            return 1
        per_launch_ns, spins_ms, per_call_ns = (float(v) for v in out.stdout.split())
    print_machine()
    print(f"simulated cuLaunchKernel: {per_launch_ns:.0f} ns per launch "
          f"({args.launches} zero-length launches)")
    ratio("launch", per_launch_ns, per_call_ns, "per cuLaunchKernel", "per cuCtxGetDevice",
          " ns")
    print(f"20 x 5 ms spin kernels: {spins_ms:.2f} ms wall (ideal 100 ms, "
          f"error {spins_ms - 100:+.2f} ms)")
    ratio("timeline", spins_ms, 100.0, "for 20 x 5 ms kernels", "ideal", " ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
