#!/usr/bin/env python3
"""keymgr's crash and soak harness (issue 15).

Crash phase: runs one `keymgr` operation at a time against a real store and a real `keymgr-refserver` on
127.0.0.1 (OS-chosen port) and SIGKILLs it at a random moment. After every kill it checks the store read-only
with sqlite3 (integrity, nothing half-written); every round it also checks that every key reported as created
still unwraps and signs (with its PIN), that `keymgr audit verify` passes and that sync converges (a second
sync writes nothing).

Soak phase: four processes at a time mix commands for a bounded time; no store `busy` (exit 75) is allowed, and
what the store and its audit log hold must match what the commands reported (no lost update).

A new operation is one entry in OPERATIONS: a name and a function that returns the command (argv, stdin) and
what to record when it succeeds or is killed.

Prints `N kills, N checks, 0 failures` and exits 1 on any failure. Replay a run with --seed.
"""

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3  # noqa: F401  (only the sqlite3 CLI is used: the store is read through it read-only)
import subprocess
import sys
import tempfile
import threading
import time

PASSWORD = "correct horse battery staple"
FAST_ARGON2 = ["--argon2-memory", "64", "--argon2-iterations", "1", "--argon2-parallelism", "1"]
SQLITE3 = shutil.which("sqlite3") or "/usr/bin/sqlite3"


class Failures:
    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def add(self, text):
        with self.lock:
            self.items.append(text)
        print(f"FAILURE: {text}", file=sys.stderr, flush=True)


class Harness:
    def __init__(self, binary, refserver, root, rng, verbose):
        self.binary = binary
        self.refserver_binary = refserver
        self.root = root
        self.home = os.path.join(root, "home")
        self.db = os.path.join(self.home, "keymgr.db")
        self.rng = rng
        self.verbose = verbose
        self.failures = Failures()
        self.kills = 0
        self.checks = 0
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("KEYMGR_") and k not in ("CREDENTIALS_DIRECTORY", "XDG_DATA_HOME")}
        self.env["HOME"] = os.path.join(root, "user-home")
        # What the harness knows: kid -> {"user", "pins": [candidate PINs], "reported": bool}
        self.created = {}
        # Users whose keys a command may have superseded or revoked (so a non-active key there is explained).
        self.touched = set()
        self.local_users = []      # users bound locally (no server)
        self.server_users = []     # users on the reference server, bound through the journey
        self.counter = 0
        self.server = None

    # ---- processes ----------------------------------------------------------------------------------

    def argv(self, args):
        return [self.binary, "--home", self.home] + args

    def run(self, args, stdin="", timeout=120):
        """Runs keymgr to completion; returns (status, stdout, stderr)."""
        proc = subprocess.run(self.argv(args), input=stdin.encode(), capture_output=True, env=self.env,
                              timeout=timeout)
        return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")

    def must(self, args, stdin=""):
        status, out, err = self.run(args, stdin)
        if status != 0:
            raise RuntimeError(f"setup step failed: keymgr {' '.join(args)} -> {status}\n{out}\n{err}")
        return out

    def start_server(self, users):
        directory = os.path.join(self.root, "refserver")
        os.makedirs(directory)
        token_file = os.path.join(directory, "admin.token")
        with open(token_file, "w") as handle:
            handle.write("admin-%016x\n" % self.rng.getrandbits(64))
        os.chmod(token_file, 0o600)
        args = [self.refserver_binary, "--db", os.path.join(directory, "refserver.db"), "--port", "0",
                "--admin-token-file", token_file, "--parent-pid", str(os.getpid()), "--idle-exit", "120"]
        for user in users:
            args += ["--add-user", f"{user}:{PASSWORD}"]
        self.server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.server.stdout.readline().decode().strip()
        if not line.startswith("listening on http://127.0.0.1:"):
            raise RuntimeError(f"keymgr-refserver did not start: {line!r}")
        base_url = line[len("listening on "):]
        self.must(["server", "set", "--dialect", "pingam", "--base-url", base_url, "--credential-file", token_file])

    def stop_server(self):
        if self.server and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=10)

    # ---- store queries (read-only) ------------------------------------------------------------------

    def sql(self, query):
        proc = subprocess.run([SQLITE3, "-readonly", "-json", self.db, query], capture_output=True, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"sqlite3 failed on {query!r}: {proc.stderr.decode(errors='replace')}")
        text = proc.stdout.decode().strip()
        return json.loads(text) if text else []

    def keys(self):
        return {row["kid"]: row for row in self.sql(
            "SELECT kid, user_id, auth_type, status, server_state FROM user_keys")}

    # ---- checks -------------------------------------------------------------------------------------

    HALF_WRITTEN = {
        "a superseded key with no successor":
            "SELECT k.kid FROM user_keys k WHERE k.status = 'superseded' AND NOT EXISTS ("
            " SELECT 1 FROM user_keys s WHERE s.user_id = k.user_id AND s.issuer = k.issuer AND s.kid <> k.kid"
            " AND s.created_at >= k.created_at)",
        "a PIN record without its key":
            "SELECT p.kid FROM app_pins p LEFT JOIN user_keys k ON k.kid = p.kid WHERE k.kid IS NULL",
        "a PIN record on a key that is not APPLICATION_PIN":
            "SELECT p.kid FROM app_pins p JOIN user_keys k ON k.kid = p.kid WHERE k.auth_type <> 'APPLICATION_PIN'"
            " AND k.status IN ('active', 'locked')",
        "an active APPLICATION_PIN key without its PIN record":
            "SELECT k.kid FROM user_keys k LEFT JOIN app_pins p ON p.kid = k.kid"
            " WHERE k.auth_type = 'APPLICATION_PIN' AND k.status IN ('active', 'locked') AND p.kid IS NULL",
        "a usable key without key material":
            "SELECT kid FROM user_keys WHERE status IN ('active', 'locked') AND wrapped_private_key IS NULL",
        "a key whose user is missing":
            "SELECT k.kid FROM user_keys k LEFT JOIN users u ON u.user_id = k.user_id WHERE u.user_id IS NULL",
        "two usable keys for one user and issuer":
            "SELECT user_id FROM user_keys WHERE status IN ('active', 'locked') GROUP BY user_id, issuer"
            " HAVING count(*) > 1",
    }

    def check_store(self, context):
        """Integrity and nothing half-written, read-only."""
        self.checks += 1
        try:
            # One read-only sqlite3 run: integrity, foreign keys and every half-written shape, labelled.
            parts = ["SELECT 'integrity_check' AS what, integrity_check AS item FROM pragma_integrity_check"
                     " WHERE integrity_check <> 'ok'",
                     "SELECT 'foreign_key_check' AS what, \"table\" || ' row ' || rowid AS item FROM pragma_foreign_key_check"]
            parts += ["SELECT '%s' AS what, item FROM (%s)" % (what, query.replace("SELECT k.kid", "SELECT k.kid AS item")
                      .replace("SELECT p.kid", "SELECT p.kid AS item").replace("SELECT kid", "SELECT kid AS item")
                      .replace("SELECT user_id", "SELECT user_id AS item"))
                      for what, query in self.HALF_WRITTEN.items()]
            for row in self.sql(" UNION ALL ".join(parts)):
                self.failures.add(f"{context}: {row['what']}: {row['item']}")
            keys = self.keys()
            for kid, known in self.created.items():
                row = keys.get(kid)
                if row is None:
                    if known["reported"]:
                        self.failures.add(f"{context}: key {kid} of {known['user']} was reported created and is gone")
                    continue
                if row["status"] != "active" and known["user"] not in self.touched and known["reported"]:
                    self.failures.add(f"{context}: key {kid} is {row['status']} though nothing superseded or revoked it")
        except Exception as error:  # a check that cannot run is a failure, never a pass
            self.failures.add(f"{context}: store check could not run: {error}")

    def check_keys_sign(self, context):
        """Every key reported created that is still active unwraps and signs (with its PIN)."""
        keys = self.keys()
        for kid, known in sorted(self.created.items()):
            row = keys.get(kid)
            if row is None or row["status"] != "active":
                continue
            self.checks += 1
            args = ["sign", "--kid", kid, "--challenge", "stress-%d" % self.rng.getrandbits(32), "--json"]
            if row["auth_type"] == "APPLICATION_PIN":
                signed = False
                tried = []
                for pin in list(known["pins"]):
                    status, out, err = self.run(args + ["--pin-stdin"], pin + "\n")
                    tried.append(status)
                    if status == 0:
                        known["pins"] = [pin]  # resolved: the PIN the store really holds
                        signed = True
                        break
                if not signed:
                    self.failures.add(f"{context}: key {kid} does not sign with any PIN it may have ({tried})")
                    continue
            else:
                status, out, err = self.run(args)
                if status != 0:
                    self.failures.add(f"{context}: key {kid} does not sign: {status} {err.strip()}")
                    continue
            try:
                answer = json.loads(out)
                if answer.get("kid") != kid or answer.get("jws", "").count(".") != 2:
                    self.failures.add(f"{context}: sign of {kid} printed {out.strip()}")
            except ValueError:
                self.failures.add(f"{context}: sign of {kid} printed no JSON: {out.strip()}")

    def check_audit(self, context):
        self.checks += 1
        status, out, err = self.run(["audit", "verify", "--json"])
        if status != 0:
            self.failures.add(f"{context}: audit verify -> {status}: {out.strip()} {err.strip()}")

    def check_sync_converges(self, context):
        """A sync after the crashes settles everything; the next one writes nothing."""
        if self.server is None:
            return
        self.checks += 1
        status, out, err = self.run(["sync", "--json"])
        if status != 0:
            self.failures.add(f"{context}: settling sync -> {status}: {out.strip()} {err.strip()}")
            return
        self.checks += 1
        status, out, err = self.run(["sync", "--json"])
        try:
            report = json.loads(out)
        except ValueError:
            report = {}
        if status != 0 or report.get("writes") != 0:
            self.failures.add(f"{context}: second sync did not converge: {status} writes={report.get('writes')} {err.strip()}")

    def full_check(self, context):
        self.check_store(context)
        self.check_keys_sign(context)
        self.check_audit(context)
        self.check_sync_converges(context)
        self.check_store(context + " after sync")

    # ---- operations ---------------------------------------------------------------------------------
    # Each returns (argv, stdin, on_done) where on_done(status, stdout, killed) records what the run did.

    def new_pin(self):
        # Six digits the PIN policy accepts: not one repeated digit, not an ascending or descending run.
        while True:
            pin = "%06d" % self.rng.randrange(100000, 999999)
            steps = {(int(b) - int(a)) % 10 for a, b in zip(pin, pin[1:])}
            if len(set(pin)) > 1 and steps not in ({1}, {9}):
                return pin

    def active_key(self, users):
        keys = self.keys()
        live = [(kid, row) for kid, row in keys.items() if row["status"] == "active" and row["user_id"] in users
                and kid in self.created]
        return self.rng.choice(live) if live else (None, None)

    def record_created(self, user, stdout, pin, killed):
        if killed:
            return
        try:
            kid = json.loads(stdout)["kid"]
        except (ValueError, KeyError, TypeError):
            self.failures.add(f"a successful command for {user} printed no key object: {stdout.strip()}")
            return
        self.created[kid] = {"user": user, "pins": [pin] if pin else [], "reported": True}

    def adopt_unreported(self, users, pin):
        """After a kill, a key the command may have created (never reported) is learned from the store, so later
        checks still sign with it; its PIN is the one the command was given."""
        for kid, row in self.keys().items():
            if kid not in self.created and row["user_id"] in users:
                self.created[kid] = {"user": row["user_id"], "pins": [pin] if pin else [], "reported": False}

    def op_bind(self):
        self.counter += 1
        user = "local-%d" % self.counter
        self.local_users.append(user)
        args = ["bind", "--user", user, "--json"]
        pin = None
        if self.rng.random() < 0.5:
            pin = self.new_pin()
            args += ["--auth-type", "app-pin", "--pin-stdin"]

        def done(status, out, killed):
            if status == 0:
                self.record_created(user, out, pin, killed)
            elif killed:
                self.adopt_unreported([user], pin)
        return args, (pin + "\n") if pin else "", done

    def op_bind_journey(self):
        user = self.rng.choice(self.server_users)
        self.touched.add(self.universal(user))  # a journey bind supersedes the user's earlier key
        args = ["bind", "--journey", "RegisterDevice", "--user", user, "--password-fd", "0", "--json"]

        def done(status, out, killed):
            if status == 0:
                self.record_created(self.universal(user), out, None, killed)
            elif killed:
                self.adopt_unreported([self.universal(user)], None)
        return args, PASSWORD + "\n", done

    def op_rebind(self):
        kid, row = self.active_key(set(self.local_users) | {self.universal(u) for u in self.server_users})
        if kid is None:
            return self.op_bind()
        user = row["user_id"]
        self.touched.add(user)
        args = ["rebind", "--user", user, "--kid", kid, "--json"]
        pin = None
        if self.rng.random() < 0.5:
            pin = self.new_pin()
            args += ["--auth-type", "app-pin", "--pin-stdin"]
        else:
            args += ["--auth-type", "none"]

        def done(status, out, killed):
            if status == 0:
                self.record_created(user, out, pin, killed)
            elif killed:
                self.adopt_unreported([user], pin)
        return args, (pin + "\n") if pin else "", done

    def op_revoke(self):
        kid, row = self.active_key(set(self.local_users) | {self.universal(u) for u in self.server_users})
        if kid is None:
            return self.op_bind()
        self.touched.add(row["user_id"])
        args = ["revoke", "--kid", kid, "--reason", "stress", "--yes", "--json"]
        return args, "", lambda status, out, killed: None

    def op_pin_change(self):
        keys = self.keys()
        candidates = [kid for kid, row in keys.items() if row["status"] == "active"
                      and row["auth_type"] == "APPLICATION_PIN" and kid in self.created
                      and len(self.created[kid]["pins"]) == 1]
        if not candidates:
            return self.op_bind()
        kid = self.rng.choice(candidates)
        known = self.created[kid]
        old = known["pins"][0]
        new = self.new_pin()
        args = ["pin", "change", "--user", keys[kid]["user_id"], "--kid", kid, "--pin-stdin", "--json"]

        def done(status, out, killed):
            if status == 0 and not killed:
                known["pins"] = [new]
            elif killed:
                known["pins"] = [new, old]  # either, never anything else: resolved by the next sign check
            else:
                self.failures.add(f"pin change of {kid} failed unkilled: {status} {out.strip()}")
        return args, f"{old}\n{new}\n", done

    def op_sync(self):
        return ["sync", "--json"], "", lambda status, out, killed: None

    def op_master_rotate(self):
        return ["master", "rotate", "--yes", "--json"], "", lambda status, out, killed: None

    def universal(self, username):
        return f"id={username},ou=user,ou=am-config"

    # The operations the crash phase kills, and how often each is picked. A new command (token refresh,
    # dcr register) is one more entry here plus its op_ method.
    OPERATIONS = [
        ("bind", "op_bind", 3),
        ("bind --journey", "op_bind_journey", 2),
        ("rebind", "op_rebind", 3),
        ("revoke", "op_revoke", 2),
        ("pin change", "op_pin_change", 3),
        ("sync", "op_sync", 2),
        ("master rotate", "op_master_rotate", 2),
    ]

    def pick(self):
        names = [entry for entry in self.OPERATIONS]
        weights = [entry[2] for entry in names]
        return self.rng.choices(names, weights)[0]

    # ---- phases -------------------------------------------------------------------------------------

    def setup(self, server_user_count):
        self.must(["init", "--device-name", "stress"] + FAST_ARGON2)
        self.server_users = ["srv%d" % i for i in range(server_user_count)]
        self.start_server(self.server_users)
        for user in self.server_users:
            out = self.must(["bind", "--journey", "RegisterDevice", "--user", user, "--password-fd", "0", "--json"],
                            PASSWORD + "\n")
            self.record_created(self.universal(user), out, None, False)
        for _ in range(3):
            args, stdin, done = self.op_bind()
            status, out, err = self.run(args, stdin)
            done(status, out, False)

    def calibrate(self):
        """How long each operation takes unkilled here, so kills land inside it."""
        durations = {}
        for name, method, _ in self.OPERATIONS:
            args, stdin, done = getattr(self, method)()
            started = time.monotonic()
            status, out, err = self.run(args, stdin)
            durations[name] = max(0.05, time.monotonic() - started)
            done(status, out, False)
            if status != 0:
                self.failures.add(f"calibration: keymgr {' '.join(args)} -> {status}: {out.strip()} {err.strip()}")
        return durations

    def crash_phase(self, target_kills, round_size, durations):
        attempts = 0
        by_operation = {}
        while self.kills < target_kills and attempts < target_kills * 6:
            attempts += 1
            name, method, _ = self.pick()
            args, stdin, done = getattr(self, method)()
            delay = self.rng.uniform(0.0, durations[name] * 1.1)
            proc = subprocess.Popen(self.argv(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self.env)
            self._feed(proc, stdin)  # a few bytes: the pipe takes them without blocking
            time.sleep(delay)
            killed = False
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed = True
            out, err = proc.communicate(timeout=120)
            status = proc.returncode
            if killed and status != -signal.SIGKILL:
                killed = False  # it finished between the poll and the signal
            if killed:
                self.kills += 1
                by_operation[name] = by_operation.get(name, 0) + 1
            elif status not in (0,) and not (name == "revoke" and status == 66):
                self.failures.add(f"keymgr {' '.join(args)} -> {status} unkilled: {out.decode().strip()} "
                                  f"{err.decode().strip()}")
            done(status, out.decode(errors="replace"), killed)
            if self.verbose:
                print(f"  {name:15s} delay {delay:.3f}s {'KILLED' if killed else 'exit %d' % status}", flush=True)
            self.check_store(f"after {name} ({'killed' if killed else 'exit %d' % status})")
            if killed and self.kills % round_size == 0:
                self.full_check(f"round at {self.kills} kills")
        self.full_check("end of the crash phase")
        return by_operation

    @staticmethod
    def _feed(proc, stdin):
        try:
            proc.stdin.write(stdin.encode())
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        proc.stdin = None  # so communicate() does not flush the closed pipe

    def soak_phase(self, seconds, workers=4, rotate=True):
        """`workers` processes at a time, each thread its own users, mixing commands until the time is up."""
        deadline = time.monotonic() + seconds
        tallies = [dict() for _ in range(workers)]
        before = self.audit_counts()

        def worker(index):
            rng = random.Random(self.rng.getrandbits(64))
            mine = {}  # user -> (kid, pin or None)
            tally = tallies[index]
            serial = 0

            def note(key):
                tally[key] = tally.get(key, 0) + 1

            while time.monotonic() < deadline:
                choice = rng.random()
                if choice < 0.3 or not mine:
                    serial += 1
                    user = f"soak-{index}-{serial}"
                    pin = "%06d" % rng.randrange(100000, 999999) if rng.random() < 0.5 else None
                    args = ["bind", "--user", user, "--json"] + (["--auth-type", "app-pin", "--pin-stdin"] if pin else [])
                    status, out, err = self.run(args, (pin + "\n") if pin else "")
                    if self.soak_outcome(args, status, out, err, tally):
                        mine[user] = (json.loads(out)["kid"], pin)
                        note("key.bound")
                elif choice < 0.55:
                    user = rng.choice(sorted(mine))
                    kid, pin = mine[user]
                    args = ["sign", "--kid", kid, "--json"] + (["--pin-stdin"] if pin else [])
                    status, out, err = self.run(args, (pin + "\n") if pin else "")
                    if self.soak_outcome(args, status, out, err, tally):
                        note("key.signed")
                elif choice < 0.7:
                    user = rng.choice(sorted(mine))
                    kid, pin = mine[user]
                    new = "%06d" % rng.randrange(100000, 999999)
                    args = ["rebind", "--user", user, "--auth-type", "app-pin", "--pin-stdin", "--json"]
                    status, out, err = self.run(args, new + "\n")
                    if self.soak_outcome(args, status, out, err, tally):
                        mine[user] = (json.loads(out)["kid"], new)
                        note("key.rebound")
                elif choice < 0.82:
                    pinned = sorted(u for u, (_, p) in mine.items() if p)
                    if not pinned:
                        continue
                    user = rng.choice(pinned)
                    kid, pin = mine[user]
                    new = "%06d" % rng.randrange(100000, 999999)
                    args = ["pin", "change", "--user", user, "--pin-stdin", "--json"]
                    status, out, err = self.run(args, f"{pin}\n{new}\n")
                    if self.soak_outcome(args, status, out, err, tally):
                        mine[user] = (kid, new)
                        note("pin.changed")
                elif choice < 0.9:
                    args = ["list", "--status", "all", "--json"]
                    status, out, err = self.run(args)
                    self.soak_outcome(args, status, out, err, tally)
                elif choice < 0.95:
                    args = ["sync", "--json"]
                    status, out, err = self.run(args)
                    if status == 75 and "another `keymgr sync`" in err:
                        note("sync lease held (expected with overlapping syncs)")
                    else:
                        self.soak_outcome(args, status, out, err, tally)
                elif rotate:
                    args = ["master", "rotate", "--yes", "--json"]
                    status, out, err = self.run(args)
                    if status == 75 and "another `keymgr master rotate`" in err:
                        note("rotation lock held (expected with overlapping rotations)")
                    elif self.soak_outcome(args, status, out, err, tally):
                        note("master.rotated")
            tally["_keys"] = mine

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        # No lost update: every successful bind/rebind is a key in the store, with the state the worker last saw.
        keys = self.keys()
        after = self.audit_counts()
        totals = {}
        for tally in tallies:
            for user, (kid, pin) in tally["_keys"].items():
                self.checks += 1
                row = keys.get(kid)
                if row is None or row["status"] != "active" or row["user_id"] != user:
                    self.failures.add(f"soak: {user}'s last reported key {kid} is {row and row['status']} in the store")
                    continue
                self.created[kid] = {"user": user, "pins": [pin] if pin else [], "reported": True}
            for name, count in tally.items():
                if not name.startswith("_"):
                    totals[name] = totals.get(name, 0) + count
        for event in ("key.bound", "key.signed", "key.rebound", "pin.changed", "master.rotated"):
            self.checks += 1
            recorded = after.get(event, 0) - before.get(event, 0)
            if recorded != totals.get(event, 0):
                self.failures.add(f"soak: {totals.get(event, 0)} successful {event} but {recorded} audit entries")
        self.full_check("after the soak")
        return totals

    def soak_outcome(self, args, status, out, err, tally):
        if status == 0:
            return True
        if status == 75 or "busy" in out or "database is locked" in err:
            tally["busy"] = tally.get("busy", 0) + 1
            self.failures.add(f"soak: store busy: keymgr {' '.join(args)} -> {status}: {err.strip()}")
        else:
            self.failures.add(f"soak: keymgr {' '.join(args)} -> {status}: {out.strip()} {err.strip()}")
        return False

    def audit_counts(self):
        return {row["event"]: row["n"] for row in self.sql("SELECT event, count(*) AS n FROM audit_events GROUP BY event")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", required=True, help="directory holding keymgr and keymgr-refserver")
    parser.add_argument("--kills", type=int, default=220, help="SIGKILLs in the crash phase (default 220)")
    parser.add_argument("--soak-seconds", type=float, default=60, help="length of the soak (default 60)")
    parser.add_argument("--round", type=int, default=25, help="kills between full checks (default 25)")
    parser.add_argument("--server-users", type=int, default=4)
    parser.add_argument("--seed", type=int, help="replay a run")
    parser.add_argument("--short", action="store_true", help="the form `make test` runs: 30 kills, 20 s soak")
    parser.add_argument("--soak-rotate", action=argparse.BooleanOptionalAction, default=True,
                        help="mix `master rotate` into the soak (default: yes)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--verbose", action="store_true")
    options = parser.parse_args()
    if options.short:
        options.kills, options.soak_seconds, options.round = 30, 20, 15
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2 ** 32)
    print(f"seed {seed} (replay: {sys.argv[0]} --seed {seed}{' --short' if options.short else ''})", flush=True)
    binary = os.path.join(options.bin_dir, "keymgr")
    refserver = os.path.join(options.bin_dir, "keymgr-refserver")
    for path in (binary, refserver, SQLITE3):
        if not os.access(path, os.X_OK):
            print(f"stress: {path} is missing: build first (swift build)", file=sys.stderr)
            return 1
    root = tempfile.mkdtemp(prefix="keymgr-stress-")
    harness = Harness(binary, refserver, root, random.Random(seed), options.verbose)
    try:
        harness.setup(options.server_users)
        durations = harness.calibrate()
        print("operation times (s): " + ", ".join(f"{k} {v:.2f}" for k, v in durations.items()), flush=True)
        by_operation = harness.crash_phase(options.kills, options.round, durations)
        print("kills by operation: " + ", ".join(f"{k} {v}" for k, v in sorted(by_operation.items())), flush=True)
        if harness.kills < options.kills:
            harness.failures.add(f"only {harness.kills} kills landed (wanted {options.kills})")
        totals = harness.soak_phase(options.soak_seconds, rotate=options.soak_rotate)
        print("soak outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())), flush=True)
    except Exception as error:
        harness.failures.add(f"harness stopped: {error!r}")
    finally:
        harness.stop_server()
        if options.keep or harness.failures.items:
            print(f"store kept in {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    failures = len(harness.failures.items)
    print(f"{harness.kills} kills, {harness.checks} checks, {failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
