"""Shared plumbing of the keymgr benchmarks: paired whole-process timing, peak RSS and instruction counts.

Each benchmark script runs keymgr and its baseline alternately in one run (A B, then B A, ...), so both see the
same machine load, and reports medians, their ratio, the median of the per-round ratios, and peak RSS (measured
under GNU time, `/usr/bin/time -f %M`, in runs of their own: see run_once). Start-up-bound targets also get instruction counts
from `valgrind --tool=callgrind`, which do not depend on how busy the machine is.

Environment (set by benchmarks/run; a script run alone falls back to these defaults):
  KEYMGR_BIN      directory holding keymgr, keymgr-core, keymgr-refserver, keymgr-benchdata
                  (default: .build-bench-release/release)
  BENCH_DATA      directory that caches generated stores (default: .build-bench)
  BENCH_RESULTS   directory where each script leaves <target>.json for the summary table (optional)
  BENCH_QUICK=1   fewer rounds (a smoke run)
"""

import atexit
import hashlib
import json
import os
import pwd
import re
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("KEYMGR_BIN", os.path.join(ROOT, ".build-bench-release", "release"))
DATA = os.environ.get("BENCH_DATA", os.path.join(ROOT, ".build-bench"))
RESULTS = os.environ.get("BENCH_RESULTS")
QUICK = os.environ.get("BENCH_QUICK") == "1"


def tool(name):
    """The path of a built keymgr executable."""
    path = os.path.join(BIN, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{path} is missing: build first (benchmarks/run does `swift build -c release`)")
    return path


def which(name):
    path = shutil.which(name)
    if path is None:
        sys.exit(f"{name} is not installed: run `make deps`")
    return path


def floor_program(source, directory, *libraries):
    """Builds floor/<source>.c into `directory` with the Swift toolchain's clang, linked with `libraries`; its path."""
    clang = os.path.join(os.environ.get("SWIFT_BIN", "/opt/swift/usr/bin"), "clang")
    if not os.access(clang, os.X_OK):
        sys.exit(f"{clang} is missing: set SWIFT_BIN to the Swift toolchain's bin directory")
    program = os.path.join(directory, f"{source}-floor")
    capture([clang, "-O2", os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor", f"{source}.c"),
             *[f"-l{library}" for library in libraries], "-o", program])
    return program


def rounds(normal, quick):
    return quick if QUICK else normal


class Run:
    """One finished process: wall seconds, peak RSS in KiB (None when not measured), exit status."""

    def __init__(self, seconds, maxrss_kib, status):
        self.seconds = seconds
        self.maxrss_kib = maxrss_kib
        self.status = status


def run_once(argv, stdin_path=None, stdout_path=None, env=None, check=True, measure_rss=False):
    """Runs argv once with posix_spawn (no shell, no pipes) and measures it from spawn to reaped.

    Peak RSS is not taken from this spawn: a child spawned by Python starts as a copy (or, with vfork, a sharer)
    of the interpreter's memory, and the kernel keeps that high-water mark across exec, so wait4 would report at
    least Python's own ~18 MiB. With measure_rss, argv runs under GNU time (`/usr/bin/time -f %M`, a small C
    program, whose own footprint is what stays in the figure) at the cost of one more exec in the timing."""
    rss_file = None
    if measure_rss:
        handle, rss_file = tempfile.mkstemp(prefix="rss.")
        os.close(handle)
        argv = [which("time"), "-f", "%M", "-o", rss_file, *argv]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, stdin_path or os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        (os.POSIX_SPAWN_OPEN, 2, stdout_path + ".err" if stdout_path else os.devnull,
         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
    ]
    environment = dict(os.environ if env is None else env)
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, environment, file_actions=actions)
    _, status, _ = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if check and code != 0:
        detail = ""
        if stdout_path and os.path.exists(stdout_path + ".err"):
            detail = open(stdout_path + ".err").read()[-2000:]
        sys.exit(f"{' '.join(argv)} exited {code} {detail}")
    maxrss = None
    if rss_file:
        text = open(rss_file).read().strip().splitlines()
        os.unlink(rss_file)
        maxrss = int(text[-1]) if text and text[-1].isdigit() else None
    return Run(seconds, maxrss, code)


def peak_rss(argv, stdin_path=None, times=3):
    """The largest peak RSS (KiB) of `times` runs under GNU time."""
    return max(run_once(argv, stdin_path=stdin_path, measure_rss=True).maxrss_kib for _ in range(times))


def capture(argv, stdin=None, env=None):
    """Runs argv and returns its stdout (for setup steps, not timed)."""
    result = subprocess.run(argv, input=stdin, env=env, capture_output=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.decode(errors='replace')[-2000:]}")
    return result.stdout


def paired(keymgr, baseline, rounds_count, warmup=2, before_each=None):
    """Alternates keymgr() and baseline() (callables returning Run), flipping the order every round."""
    for _ in range(warmup):
        if before_each:
            before_each()
        keymgr()
        baseline()
    a, b = [], []
    for index in range(rounds_count):
        if before_each:
            before_each()
        if index % 2 == 0:
            a.append(keymgr())
            b.append(baseline())
        else:
            b.append(baseline())
            a.append(keymgr())
    return a, b


def summary(a, b, rss=None):
    """Medians, ratio of medians, median of paired ratios, and peak RSS of each side: from the runs themselves
    when they measured it, else `rss` = (keymgr KiB, baseline KiB) measured apart (see peak_rss)."""
    ma = statistics.median(r.seconds for r in a)
    mb = statistics.median(r.seconds for r in b)
    return {
        "rounds": len(a),
        "keymgr_median_s": ma,
        "baseline_median_s": mb,
        "ratio": ma / mb,
        "paired_ratio_median": statistics.median(x.seconds / y.seconds for x, y in zip(a, b)),
        "keymgr_min_s": min(r.seconds for r in a),
        "baseline_min_s": min(r.seconds for r in b),
        "keymgr_peak_rss_kib": rss[0] if rss else max(r.maxrss_kib for r in a),
        "baseline_peak_rss_kib": rss[1] if rss else max(r.maxrss_kib for r in b),
    }


def instructions(argv, stdin_path=None, env=None, out_dir=None):
    """Instructions executed by argv (all threads), counted by callgrind; keeps the profile in out_dir if given."""
    valgrind = which("valgrind")
    # In embedded mode the `keymgr` client execs keymgr-core, and callgrind does not follow an exec: count the
    # program that does the work (the client's own start is the agent benchmark's clientstart row).
    if os.path.basename(argv[0]) == "keymgr" and "--socket" not in argv:
        argv = [os.path.join(os.path.dirname(argv[0]), "keymgr-core"), *argv[1:]]
    handle, out = tempfile.mkstemp(prefix="callgrind.", dir=out_dir)
    os.close(handle)
    # valgrind 3.19 gives up on the debug info of a release build ("possibly corrupted debuginfo file"): count a
    # copy without it (symbols kept, so the profile still names functions). Same code, same instructions.
    stripped = None
    if not os.path.realpath(argv[0]).startswith("/usr/"):  # keymgr, not a baseline from the system
        handle, stripped = tempfile.mkstemp(prefix=os.path.basename(argv[0]) + ".", dir=os.path.dirname(argv[0]))
        os.close(handle)
        subprocess.run([which("strip"), "--strip-debug", "-o", stripped, argv[0]], check=True)
        os.chmod(stripped, 0o755)
        argv = [stripped, *argv[1:]]
    stdin = open(stdin_path or os.devnull, "rb")
    try:
        result = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
                                stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    finally:
        stdin.close()
        if stripped:
            os.unlink(stripped)
    text = result.stderr.decode(errors="replace")
    match = re.search(r"Collected\s*:\s*(\d+)", text)
    if result.returncode != 0 or not match:
        sys.exit(f"callgrind of {' '.join(argv)} failed ({result.returncode}): {text[-2000:]}")
    if out_dir is None:
        os.unlink(out)
    return int(match.group(1))


def report(target, goal, goal_ratio, numbers, extra=None):
    """Prints one target's figures and leaves them for benchmarks/run's table."""
    numbers = dict(numbers)
    numbers.update(target=target, goal=goal, goal_ratio=goal_ratio)
    numbers["met"] = numbers["ratio"] <= goal_ratio if goal_ratio is not None else None
    if extra:
        numbers.update(extra)
    print(f"{target}: keymgr {numbers['keymgr_median_s'] * 1000:.1f} ms, baseline {numbers['baseline_median_s'] * 1000:.1f} ms "
          f"(medians of {numbers['rounds']}), ratio {numbers['ratio']:.2f}x (paired {numbers['paired_ratio_median']:.2f}x), "
          f"goal {goal}; peak RSS {numbers['keymgr_peak_rss_kib'] / 1024:.1f} MiB vs {numbers['baseline_peak_rss_kib'] / 1024:.1f} MiB"
          + (f"; instructions {numbers['keymgr_instructions'] / 1e6:.1f} M vs {numbers['baseline_instructions'] / 1e6:.1f} M"
             if numbers.get("keymgr_instructions") else ""))
    for key, value in (extra or {}).items():
        print(f"  {key}: {value}")
    if RESULTS:
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, f"{target}.json"), "w") as out:
            json.dump(numbers, out, indent=1, sort_keys=True)


def binary_digest(*names):
    """A short digest of the built executables, so cached data sets follow the code that made them."""
    digest = hashlib.sha256()
    for name in names:
        with open(tool(name), "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def work_dir(name):
    """A fresh scratch directory for one script's run."""
    path = os.path.join(DATA, "run", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def generated_store(users, keys_per_user, prefix="user"):
    """A store of `users` users with `keys_per_user` NONE keys each, made once by keymgr-benchdata and cached.

    Returns the cached home; callers copy it (copy_home) before anything that writes."""
    key = f"{prefix}-{users}x{keys_per_user}-{binary_digest('keymgr-benchdata')}"
    home = os.path.join(DATA, "stores", key)
    if os.path.exists(home + ".done"):
        return home
    shutil.rmtree(home, ignore_errors=True)
    os.makedirs(os.path.dirname(home), exist_ok=True)
    # eatmydata turns the fixture's 2 fsyncs per bind into none; the benchmarks themselves run without it.
    wrapper = [shutil.which("eatmydata")] if shutil.which("eatmydata") else []
    started = time.perf_counter()
    out = capture(wrapper + [tool("keymgr-benchdata"), "--home", home, "--users", str(users),
                             "--keys-per-user", str(keys_per_user), "--user-prefix", prefix])
    print(f"  generated {users} users x {keys_per_user} keys in {time.perf_counter() - started:.1f} s: {out.decode().strip()}",
          file=sys.stderr)
    open(home + ".done", "w").close()
    return home


def copy_home(source, destination):
    """A private copy of a store home (database, WAL and master key), modes kept."""
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(source, destination, symlinks=True)
    os.chmod(destination, 0o700)
    return destination


def small_store(directory, argon2=None):
    """A fresh store made by the keymgr CLI, with one NONE user `alice` (and `bob` with a PIN if argon2 is given)."""
    keymgr = tool("keymgr")
    home = os.path.join(directory, "home")
    init = [keymgr, "--home", home, "init", "--device-name", "bench"]
    if argon2:
        init += ["--argon2-memory", str(argon2[0]), "--argon2-iterations", str(argon2[1]),
                 "--argon2-parallelism", str(argon2[2])]
    capture(init)
    capture([keymgr, "--home", home, "bind", "--user", "alice", "--username", "alice@example.com"])
    if argon2:
        capture([keymgr, "--home", home, "bind", "--user", "bob", "--auth-type", "app-pin", "--pin-stdin"],
                stdin=b"482916\n")
    return home


def start_agent(home, name, directory, options=(), policy_extra=""):
    """`keymgr-core agent` serving `home` on a socket of its own in `directory`, in the foreground as this user, with
    a policy that lets this user do everything (its cost is part of every request; its rules are not what is
    measured), then `policy_extra`, and the agent options given. Waits until it answers a `status`; stops it at exit. Returns (process,
    socket path)."""
    keymgr, core = tool("keymgr"), tool("keymgr-core")
    socket_path = os.path.join(directory, f"{name}.sock")
    policy = os.path.join(directory, f"{name}-policy.toml")
    with open(policy, "w") as handle:
        # This user may do everything, for every identity user (`for` defaults to "*").
        handle.write(f'[[rule]]\nwho = ["user:{pwd.getpwuid(os.getuid()).pw_name}"]\nmay = ["*"]\n' + policy_extra)
    os.chmod(policy, 0o600)
    log = open(os.path.join(directory, f"{name}-agent.log"), "w")
    process = subprocess.Popen([core, "agent", "--home", home, "--socket", socket_path, "--policy", policy, *options],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    atexit.register(_stop, process)
    deadline = time.time() + 60
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"the agent exited {process.returncode}: {open(log.name).read()[-2000:]}")
        if os.path.exists(socket_path) and run_once([keymgr, "--socket", socket_path, "status"], check=False).status == 0:
            return process, socket_path
        time.sleep(0.1)
    sys.exit(f"the agent did not answer within 60 s: {open(log.name).read()[-2000:]}")


def start_standin(script, socket_path, *arguments):
    """A stand-in agent, floor/<script> SOCKET_PATH ARGUMENTS..., once its socket exists; stopped at exit."""
    process = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor", script),
                                socket_path, *arguments])
    atexit.register(_stop, process)
    deadline = time.time() + 30
    while not os.path.exists(socket_path) and time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"floor/{script} exited {process.returncode}")
        time.sleep(0.05)
    return process


def _stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def concurrent_runs(argv_of_client, clients, per_client):
    """Runs `clients` clients at once, each `per_client` times in a row (argv_of_client(number) gives a client's
    command line); returns every Run."""
    import threading
    runs, failures, lock = [], [], threading.Lock()

    def client(number):
        argv = argv_of_client(number)
        output = os.path.join(tempfile.gettempdir(), f"keymgr-bench-client-{os.getpid()}-{number}")
        for _ in range(per_client):
            run = run_once(argv, stdout_path=output, check=False)  # (sys.exit in a thread would only end that thread)
            with lock:
                if run.status == 0:
                    runs.append(run)
                else:
                    failures.append(open(output + ".err").read().strip()[-300:] or f"exit {run.status}")
        for path in (output, output + ".err"):
            if os.path.exists(path):
                os.unlink(path)

    threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"{len(failures)} of {len(runs) + len(failures)} concurrent runs of {' '.join(argv_of_client(0))} "
                 f"failed: {'; '.join(sorted(set(failures)))}")
    return runs


def percentile(values, fraction):
    """The nearest-rank percentile of `values` (0 < fraction <= 1)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]
