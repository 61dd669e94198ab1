#!/usr/bin/env python3
"""keymgr's crash and soak harness (issue 15).

Two stores share one real `keymgr-refserver` on 127.0.0.1 (OS-chosen port): the device store speaks PingAM (keys,
journeys, device sync), the OAuth store a Curity-like authorization server (`server set --dialect curity --bound`:
DCR, device-grant login, DPoP-bound tokens, refresh-token rotation, registration credentials rotated on every
read).

Crash phase: runs one `keymgr` operation at a time against one of the stores and SIGKILLs it at a random moment. After every kill it checks the store read-only
with sqlite3 (integrity, nothing half-written); every round it also checks that every key reported as created
still unwraps and signs (with its PIN), that `keymgr audit verify` passes and that sync converges (a second
sync writes nothing). For the OAuth store: every token a completed run reported (`token print`, `token refresh`,
`login`) is the one stored and the one the server holds active (`token import` of the Bearer tokens the server
mints is refused by the `--bound` profile, exit 76, and must leave the user's tokens as they were); a refresh token a killed run
spent ends, at the next refresh, in exit 77 "log in again" with the tokens and DPoP key discarded, never in
anything else; a registration whose credentials a killed sync's read rotated away is wiped by the next sync;
every registration's and token set's secrets still open; no registration without its secret, no token row without
its DPoP key or its registration.

Soak phase: four processes at a time mix commands for a bounded time; no store `busy` (exit 75) is allowed, and
what the store and its audit log hold must match what the commands reported (no lost update). The OAuth store
takes `dcr register`, refreshes of shared users (single-flight: no refresh token presented twice, one
`tokens.refreshed` audit entry per refresh the server saw), sync and master rotate meanwhile.

A new operation is one entry in OPERATIONS: a name and a function that returns the command (argv, stdin), what
to record when it succeeds or is killed, and (for the OAuth store) which home it runs in.

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
import urllib.request

PASSWORD = "correct horse battery staple"
FAST_ARGON2 = ["--argon2-memory", "64", "--argon2-iterations", "1", "--argon2-parallelism", "1"]
SQLITE3 = shutil.which("sqlite3") or "/usr/bin/sqlite3"



# The six-digit entries of the PIN policy's block list (Sources/KeyManager/AppPIN.swift): refused like runs and repeats.
BLOCKED_PINS = {"123456", "654321", "121212", "112233", "123123", "123321", "696969", "159753", "147258", "258369",
                "987654", "123654", "789456", "456789", "102030", "131313"}


def acceptable_pin(rng):
    """Six digits the PIN policy accepts: not one repeated digit, not an ascending or descending run, not blocked."""
    while True:
        pin = "%06d" % rng.randrange(100000, 999999)
        steps = {(int(b) - int(a)) % 10 for a, b in zip(pin, pin[1:])}
        if len(set(pin)) > 1 and steps not in ({1}, {9}) and pin not in BLOCKED_PINS:
            return pin

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
        # The OAuth store, and what the harness knows of each of its users (see new_oauth_user).
        self.ohome = os.path.join(root, "home-oauth")
        self.odb = os.path.join(self.ohome, "keymgr.db")
        self.oauth = {}
        self.oauth_counter = 0
        self.client_users = {}     # client_id -> user, for the device-grant approver
        self.base_url = None
        self.admin_token = None
        self.approver_stop = threading.Event()
        self.explained = {}        # outcomes a kill explains (e.g. invalid_grant after a killed refresh), counted
        self.kill_trigger = None   # set by an operation that is killed at a moment it names, not after a delay
        self.tpm_arm = None        # with --tpm: the TPM relay's arm file (see Tests/tools/tpm_gate.py)

    # ---- processes ----------------------------------------------------------------------------------

    def argv(self, args, home=None):
        return [self.binary, "--home", home or self.home] + args

    def run(self, args, stdin="", timeout=120, home=None):
        """Runs keymgr to completion; returns (status, stdout, stderr)."""
        proc = subprocess.run(self.argv(args, home), input=stdin.encode(), capture_output=True, env=self.env,
                              timeout=timeout)
        return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")

    def must(self, args, stdin="", home=None):
        status, out, err = self.run(args, stdin, home=home)
        if status != 0:
            raise RuntimeError(f"setup step failed: keymgr {' '.join(args)} -> {status}\n{out}\n{err}")
        return out

    def explain(self, what):
        self.explained[what] = self.explained.get(what, 0) + 1

    def admin(self, method, path, body=None):
        """The reference server's admin surface (/__refserver/oauth/...): the JSON answer."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url.rstrip("/") + "/__refserver/oauth/" + path, data=data,
                                         method=method)
        request.add_header("Authorization", "Bearer " + self.admin_token)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read().decode()
        return json.loads(text) if text.strip() else None

    def approver(self):
        """Approves every pending device-grant login at once, as the person at the verification page would."""
        while not self.approver_stop.wait(0.05):
            try:
                for code in self.admin("GET", "device")["result"]:
                    if code.get("status") == "pending":
                        subject = self.client_users.get(code.get("client_id"), "stress")
                        self.admin("POST", "device/approve", {"user_code": code["user_code"], "subject": subject})
            except Exception:  # the server may be busy or stopping; the next round tries again
                pass

    def start_server(self, users):
        directory = os.path.join(self.root, "refserver")
        os.makedirs(directory)
        token_file = os.path.join(directory, "admin.token")
        with open(token_file, "w") as handle:
            handle.write("admin-%016x\n" % self.rng.getrandbits(64))
        os.chmod(token_file, 0o600)
        args = [self.refserver_binary, "--db", os.path.join(directory, "refserver.db"), "--port", "0",
                "--admin-token-file", token_file, "--parent-pid", str(os.getpid()), "--idle-exit", "120",
                "--oauth-device-interval", "1"]
        for user in users:
            args += ["--add-user", f"{user}:{PASSWORD}"]
        self.server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.server.stdout.readline().decode().strip()
        if not line.startswith("listening on http://127.0.0.1:"):
            raise RuntimeError(f"keymgr-refserver did not start: {line!r}")
        base_url = line[len("listening on "):]
        self.base_url = base_url
        with open(token_file) as handle:
            self.admin_token = handle.read().strip()
        self.must(["server", "set", "--dialect", "pingam", "--base-url", base_url, "--credential-file", token_file])
        issuer = base_url.rstrip("/")
        self.must(["server", "set", "--dialect", "curity", "--base-url", issuer, "--issuer", issuer, "--bound"],
                  home=self.ohome)
        threading.Thread(target=self.approver, daemon=True).start()

    def stop_server(self):
        self.approver_stop.set()
        if self.server and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=10)

    # ---- store queries (read-only) ------------------------------------------------------------------

    def sql(self, query, db=None):
        proc = subprocess.run([SQLITE3, "-readonly", "-json", db or self.db, query], capture_output=True, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"sqlite3 failed on {query!r}: {proc.stderr.decode(errors='replace')}")
        text = proc.stdout.decode().strip()
        return json.loads(text) if text else []

    def keys(self):
        return {row["kid"]: row for row in self.sql(
            "SELECT kid, user_id, auth_type, status, server_state FROM user_keys")}

    # ---- checks -------------------------------------------------------------------------------------

    # Each query selects the rows (as `item`) that are half-written in one way. They run after every operation on
    # both stores (a store without OAuth rows or without keys simply has none to report).
    HALF_WRITTEN = {
        "a superseded key with no successor":
            "SELECT k.kid AS item FROM user_keys k WHERE k.status = 'superseded' AND NOT EXISTS ("
            " SELECT 1 FROM user_keys s WHERE s.user_id = k.user_id AND s.issuer = k.issuer AND s.kid <> k.kid"
            " AND s.created_at >= k.created_at)",
        "a PIN record without its key":
            "SELECT p.kid AS item FROM app_pins p LEFT JOIN user_keys k ON k.kid = p.kid WHERE k.kid IS NULL",
        "a PIN record on a key that is not APPLICATION_PIN":
            "SELECT p.kid AS item FROM app_pins p JOIN user_keys k ON k.kid = p.kid"
            " WHERE k.auth_type <> 'APPLICATION_PIN' AND k.status IN ('active', 'locked')",
        "an active APPLICATION_PIN key without its PIN record":
            "SELECT k.kid AS item FROM user_keys k LEFT JOIN app_pins p ON p.kid = k.kid"
            " WHERE k.auth_type = 'APPLICATION_PIN' AND k.status IN ('active', 'locked') AND p.kid IS NULL",
        "a usable key without key material":
            "SELECT kid AS item FROM user_keys WHERE status IN ('active', 'locked') AND wrapped_private_key IS NULL",
        "a key whose user is missing":
            "SELECT k.kid AS item FROM user_keys k LEFT JOIN users u ON u.user_id = k.user_id WHERE u.user_id IS NULL",
        "two usable keys for one user and issuer":
            "SELECT user_id AS item FROM user_keys WHERE status IN ('active', 'locked') GROUP BY user_id, issuer"
            " HAVING count(*) > 1",
        "a registration without its client secret":
            "SELECT user_id AS item FROM registrations WHERE sealed_client_secret IS NULL"
            " AND coalesce(token_endpoint_auth_method, '') <> 'none'",
        "a registration without its registration access token":
            "SELECT user_id AS item FROM registrations WHERE registration_client_uri IS NOT NULL"
            " AND sealed_registration_access_token IS NULL",
        "a token row without its access token":
            "SELECT user_id AS item FROM tokens WHERE sealed_access_token IS NULL",
        "a bound token row without its DPoP key":
            "SELECT user_id AS item FROM tokens WHERE (token_type = 'DPoP' OR jkt IS NOT NULL OR sealed_dpop_key IS NOT NULL)"
            " AND (jkt IS NULL OR sealed_dpop_key IS NULL)",
        "a token row without its registration (or of another client)":
            "SELECT t.user_id AS item FROM tokens t LEFT JOIN registrations r"
            " ON r.user_id = t.user_id AND r.server_name = t.server_name"
            " WHERE r.user_id IS NULL OR r.client_id <> t.client_id",
    }

    def check_store(self, context, db=None):
        """Integrity and nothing half-written, read-only; for the device store also the keys reported created."""
        self.checks += 1
        try:
            # One read-only sqlite3 run: integrity, foreign keys and every half-written shape, labelled.
            parts = ["SELECT 'integrity_check' AS what, integrity_check AS item FROM pragma_integrity_check"
                     " WHERE integrity_check <> 'ok'",
                     "SELECT 'foreign_key_check' AS what, \"table\" || ' row ' || rowid AS item FROM pragma_foreign_key_check"]
            parts += ["SELECT '%s' AS what, item FROM (%s)" % (what, query) for what, query in self.HALF_WRITTEN.items()]
            for row in self.sql(" UNION ALL ".join(parts), db):
                self.failures.add(f"{context}: {row['what']}: {row['item']}")
            if db is not None and db != self.db:
                return
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
        self.oauth_full_check(context)

    # ---- operations ---------------------------------------------------------------------------------
    # Each returns (argv, stdin, on_done[, home]) where on_done(status, stdout, killed) records what the run did;
    # home is the OAuth store's for its operations, else the device store.

    def new_pin(self):
        return acceptable_pin(self.rng)

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

    def op_sign(self):
        """A sign with a NONE key (its one write steps a TPM store's rollback counter)."""
        keys = self.keys()
        live = [kid for kid, row in keys.items() if row["status"] == "active" and row["auth_type"] == "NONE"
                and kid in self.created]
        if not live:
            return self.op_bind()
        args = ["sign", "--kid", self.rng.choice(live), "--challenge", "stress-kill", "--json"]
        return args, "", lambda status, out, killed: None

    def at_increment(self, method):
        """`method`'s operation, killed by the TPM relay as it sends NV_Increment, before the TPM sees it: the
        moment between a write's commit and its rollback counter's step (--tpm only)."""
        made = getattr(self, method)()
        args, stdin, done = made[:3]
        with open(self.tpm_arm, "w") as arm:
            arm.write("0x134\n")
        self.kill_trigger = lambda: not os.path.exists(self.tpm_arm)

        def disarmed(status, out, killed):
            if os.path.exists(self.tpm_arm):  # it never sent one (an earlier refusal): nobody else is killed
                os.unlink(self.tpm_arm)
            done(status, out, killed)
        return (args, stdin, disarmed) + tuple(made[3:])

    def op_sign_at_increment(self):
        return self.at_increment("op_sign")

    def op_bind_at_increment(self):
        return self.at_increment("op_bind")

    def op_master_rotate_at_increment(self):
        return self.at_increment("op_master_rotate")

    def universal(self, username):
        return f"id={username},ou=user,ou=am-config"

    # ---- the OAuth store ------------------------------------------------------------------------------
    # What the harness knows of each OAuth user:
    #   registered  the store holds a registration (client) for the user
    #   client      its client_id, as `dcr register` reported it (or as the store shows after a killed register)
    #   tokens      the store holds a token set
    #   reported    what the last completed token command reported: ("access", token) for print/import, or
    #               ("set", {"expiresAt", "jkt", "bound", "tokenType"}) for refresh/login; None after a kill
    #   spent       a killed refresh or login may have left a refresh token the server no longer accepts
    #   stale       a killed sync may have read the registration (rotating its secret and registration access
    #               token at the server) without storing what it got: the next sync wipes it

    @staticmethod
    def new_oauth_user():
        return {"registered": False, "client": None, "tokens": False, "reported": None, "spent": False,
                "stale": False}

    def oauth_rows(self):
        registrations = {row["user_id"]: row for row in self.sql(
            "SELECT user_id, client_id FROM registrations", self.odb)}
        tokens = {row["user_id"]: row for row in self.sql(
            "SELECT user_id, client_id, token_type, jkt FROM tokens", self.odb)}
        return registrations, tokens

    def learn_oauth(self, user):
        """After a kill: what the store holds for `user` now (a killed command either committed or did not)."""
        registrations, tokens = self.oauth_rows()
        state = self.oauth[user]
        state["registered"] = user in registrations
        if state["registered"]:
            state["client"] = registrations[user]["client_id"]
            self.client_users[state["client"]] = user
        state["tokens"] = user in tokens
        state["reported"] = None

    def oauth_pick(self, want_tokens):
        users = sorted(u for u, s in self.oauth.items() if s["registered"] and not s["stale"]
                       and (s["tokens"] or not want_tokens))
        return self.rng.choice(users) if users else None

    def check_oauth_user(self, user, context):
        """What the store holds for `user` is what the last completed command reported, and what the server
        holds active: the stored client is the reported one, the stored tokens are live tokens of that client (by
        the same DPoP key), and the reported token is the stored one."""
        state = self.oauth[user]
        self.checks += 1
        registrations, tokens = self.oauth_rows()
        if state["registered"] != (user in registrations):
            self.failures.add(f"{context}: {user}'s registration is {'missing' if state['registered'] else 'there'}")
            return
        if state["registered"] and registrations[user]["client_id"] != state["client"]:
            self.failures.add(f"{context}: {user}'s stored client {registrations[user]['client_id']} is not the "
                              f"reported {state['client']}")
        if state["tokens"] != (user in tokens):
            self.failures.add(f"{context}: {user}'s tokens are {'missing' if state['tokens'] else 'there'}")
            return
        if not state["tokens"]:
            return
        status, out, err = self.run(["token", "show", "--user", user, "--reveal", "--json"], home=self.ohome)
        if status != 0:
            self.failures.add(f"{context}: token show of {user} -> {status}: {out.strip()} {err.strip()}")
            return
        shown = json.loads(out)
        reported = state["reported"]
        if reported and reported[0] == "access" and shown.get("accessToken") != reported[1]:
            self.failures.add(f"{context}: {user}'s reported access token is not the stored one")
        if reported and reported[0] == "set":
            for name, value in reported[1].items():
                if shown.get(name) != value:
                    self.failures.add(f"{context}: {user}'s reported {name} {value!r} is not the stored {shown.get(name)!r}")
        if state["spent"]:
            return  # the stored refresh token may be one a killed run spent: the next refresh settles it
        server = {row["token"]: row for row in self.admin("GET", "tokens")["result"]}
        for kind, token in (("refresh", shown.get("refreshToken")), ("access", shown.get("accessToken"))):
            row = server.get(token)
            if row is None or row.get("status") != "active" or row.get("client_id") != state["client"]:
                self.failures.add(f"{context}: {user}'s stored {kind} token is "
                                  f"{'unknown to the server' if row is None else row.get('status')} "
                                  f"(client {row and row.get('client_id')}, registered {state['client']})")
            elif shown.get("bound") and row.get("jkt") not in (None, shown.get("jkt")):
                self.failures.add(f"{context}: {user}'s stored {kind} token is bound to another DPoP key")

    def oauth_refused(self, user, status, out, err, context):
        """A token command for `user` that failed unkilled: only what a kill explains, with the clear message."""
        state = self.oauth[user]
        text = out + err
        if status == 77 and state["spent"] and f"keymgr login --user {user}" in text:
            # The refresh token a killed run spent: invalid_grant. The tokens and DPoP key must be gone.
            self.explain("invalid_grant after a killed refresh (tokens discarded, log in again)")
            code, shown, _ = self.run(["token", "show", "--user", user, "--json"], home=self.ohome)
            if code != 66:
                self.failures.add(f"{context}: after invalid_grant {user}'s tokens were not discarded: {code} {shown.strip()}")
            state.update(tokens=False, spent=False, reported=None)
            return
        if status == 77 and state["stale"] and "dcr register" in text:
            self.explain("invalid_client after a killed sync rotated the client secret (register again)")
            return
        self.failures.add(f"{context}: keymgr for {user} -> {status} unkilled: {out.strip()} {err.strip()}")

    def op_dcr_register(self):
        wiped = sorted(u for u, s in self.oauth.items() if not s["registered"])
        if wiped and self.rng.random() < 0.5:
            user = self.rng.choice(wiped)  # registered again after a sync wiped it, or a killed register
        else:
            self.oauth_counter += 1
            user = "oauth-%d" % self.oauth_counter
            self.oauth[user] = self.new_oauth_user()
        args = ["dcr", "register", "--user", user, "--software-id", "keymgr-template", "--json"]

        def done(status, out, killed):
            state = self.oauth[user]
            if killed:
                self.learn_oauth(user)
            elif status == 0:
                client = json.loads(out)["clientId"]
                state.update(registered=True, client=client, tokens=False, reported=None, spent=False, stale=False)
                self.client_users[client] = user
                self.check_oauth_user(user, f"after dcr register of {user}")
            else:
                self.failures.add(f"dcr register of {user} -> {status} unkilled: {out.strip()}")
        return args, "", done, self.ohome

    def op_token_refresh(self):
        user = self.oauth_pick(want_tokens=True)
        if user is None:
            return self.op_login()
        return self.op_token_refresh_of(user, printing=self.rng.random() < 0.5)

    def op_token_refresh_of(self, user, printing):
        if printing:  # a --min-ttl beyond the token's lifetime: refreshed first, then printed
            args = ["token", "print", "--user", user, "--min-ttl", "86000", "--json"]
        else:
            args = ["token", "refresh", "--user", user, "--json"]

        def done(status, out, killed):
            state = self.oauth[user]
            if killed:
                self.learn_oauth(user)
                state["spent"] = state["tokens"]
            elif status == 0:
                answer = json.loads(out)
                if printing:
                    state["reported"] = ("access", answer["accessToken"])
                else:
                    state["reported"] = ("set", {k: answer.get(k) for k in ("expiresAt", "jkt", "bound", "tokenType")})
                state["spent"] = False
                self.check_oauth_user(user, f"after {args[1]} of {user}")
            else:
                self.oauth_refused(user, status, out, "", f"{args[1]} of {user}")
        return args, "", done, self.ohome

    def op_token_refresh_at_spend(self):
        """A refresh killed the moment the server has spent the refresh token: before keymgr stored the new one
        (the stored refresh token is dead: the next refresh must end in a clean invalid_grant) or just after."""
        user = self.oauth_pick(want_tokens=True)
        if user is None or self.oauth[user]["spent"]:
            return self.op_token_refresh()
        status, out, err = self.run(["token", "show", "--user", user, "--reveal", "--json"], home=self.ohome)
        if status != 0:
            self.failures.add(f"token show of {user} -> {status}: {out.strip()} {err.strip()}")
            return self.op_token_refresh()
        spending = json.loads(out)["refreshToken"]

        def spent():
            try:
                return any(row["token"] == spending and row.get("status") != "active"
                           for row in self.admin("GET", "tokens")["result"])
            except Exception:
                return False
        self.kill_trigger = spent
        args, stdin, done, home = self.op_token_refresh_of(user, printing=False)
        return args, stdin, done, home

    def op_login(self):
        user = self.oauth_pick(want_tokens=False)
        if user is None:
            return self.op_dcr_register()
        args = ["login", "--user", user, "--json"]

        def done(status, out, killed):
            state = self.oauth[user]
            if killed:
                spent = state["spent"]
                had = state["tokens"]
                self.learn_oauth(user)
                state["spent"] = spent and had and state["tokens"]
            elif status == 0:
                answer = json.loads(out)
                state.update(tokens=True, spent=False,
                             reported=("set", {k: answer.get(k) for k in ("expiresAt", "jkt", "bound", "tokenType")}))
                self.check_oauth_user(user, f"after login of {user}")
            else:
                self.oauth_refused(user, status, out, "", f"login of {user}")
        return args, "", done, self.ohome

    def op_token_import(self):
        user = self.oauth_pick(want_tokens=False)
        if user is None:
            return self.op_dcr_register()
        minted = self.admin("POST", "tokens", {"client_id": self.oauth[user]["client"], "subject": user})
        args = ["token", "import", "--user", user, "--json"]

        def done(status, out, killed):
            state = self.oauth[user]
            if killed:
                spent = state["spent"]
                self.learn_oauth(user)
                state["spent"] = spent and state["tokens"]  # the earlier set may still be there, as it was
            elif status == 76 and '"serverRejected"' in out:
                # Bearer tokens to a --bound profile: refused, and nothing of the user's changed.
                self.check_oauth_user(user, f"after a refused token import of {user}")
            else:
                self.failures.add(f"token import of {user} -> {status} unkilled: {out.strip()}")
        return args, json.dumps(minted), done, self.ohome

    def settled_oauth_sync(self, status, out, context):
        """A completed sync of the OAuth store: only registrations a killed sync left stale may be wiped."""
        try:
            report = json.loads(out)
        except ValueError:
            self.failures.add(f"{context}: sync printed no JSON: {out.strip()}")
            return None
        if status != 0 or report.get("errors"):
            self.failures.add(f"{context}: sync -> {status}: {out.strip()}")
        for user in report.get("registrationsWiped") or []:
            state = self.oauth.get(user)
            if state is None or not state["stale"]:
                self.failures.add(f"{context}: sync wiped {user}'s registration, which no killed sync explains")
            else:
                self.explain("registration wiped by the next sync after a killed sync rotated it (register again)")
            if state is not None:
                state.update(registered=False, client=None, tokens=False, reported=None, spent=False, stale=False)
        for state in self.oauth.values():
            state["stale"] = False
        return report

    def op_oauth_sync(self):
        def done(status, out, killed):
            if killed:
                # A killed sync may have committed wipes it never got to report (a registration an earlier killed
                # sync left stale): learnt from the store, and only a stale registration may have gone.
                registrations, tokens = self.oauth_rows()
                for user, state in self.oauth.items():
                    if state["registered"] and user not in registrations:
                        if state["stale"]:
                            self.explain("registration wiped by the next sync after a killed sync rotated it (register again)")
                        else:
                            self.failures.add(f"a killed sync of the OAuth store wiped {user}'s registration, "
                                              "which no killed sync explains")
                        state.update(registered=False, client=None, tokens=False, reported=None, spent=False,
                                     stale=False)
                    elif state["tokens"] and user not in tokens:
                        self.failures.add(f"a killed sync of the OAuth store took {user}'s tokens and left the registration")
                        state.update(tokens=False, reported=None, spent=False)
                for state in self.oauth.values():
                    if state["registered"]:
                        state["stale"] = True
            else:
                self.settled_oauth_sync(status, out, "sync of the OAuth store")
        return ["sync", "--json"], "", done, self.ohome

    def op_oauth_master_rotate(self):
        def done(status, out, killed):
            if not killed and status != 0:
                self.failures.add(f"master rotate of the OAuth store -> {status}: {out.strip()}")
        return ["master", "rotate", "--yes", "--json"], "", done, self.ohome

    def oauth_full_check(self, context):
        """The OAuth store: nothing half-written, the audit chain, every secret still opens (after killed master
        rotations), the next sync converges, and every user's tokens refresh (or, after a killed refresh, end in
        a clean "log in again" and log in again)."""
        self.check_store(context + " (OAuth store)", self.odb)
        self.checks += 1
        status, out, err = self.run(["audit", "verify", "--json"], home=self.ohome)
        if status != 0:
            self.failures.add(f"{context}: OAuth store audit verify -> {status}: {out.strip()} {err.strip()}")
        registrations, tokens = self.oauth_rows()
        for user in sorted(registrations):
            self.checks += 1
            status, out, err = self.run(["dcr", "show", "--user", user, "--reveal", "--json"], home=self.ohome)
            if status != 0 or not json.loads(out).get("clientSecret"):
                self.failures.add(f"{context}: {user}'s client secret does not open: {status} {out.strip()} {err.strip()}")
        for user in sorted(tokens):
            self.checks += 1
            status, out, err = self.run(["token", "show", "--user", user, "--reveal", "--json"], home=self.ohome)
            if status != 0 or not json.loads(out).get("accessToken"):
                self.failures.add(f"{context}: {user}'s tokens do not open: {status} {out.strip()} {err.strip()}")
        self.checks += 1
        status, out, err = self.run(["sync", "--json"], home=self.ohome)
        self.settled_oauth_sync(status, out, context + ": settling sync of the OAuth store")
        self.checks += 1
        status, out, err = self.run(["sync", "--json"], home=self.ohome)
        report = self.settled_oauth_sync(status, out, context + ": second sync of the OAuth store") or {}
        if report.get("writes") != 0 or report.get("registrationsWiped"):
            self.failures.add(f"{context}: second sync of the OAuth store did not converge: {out.strip()}")
        new_logins = 2  # users registered but never logged in: a few per round, so the check stays cheap
        for user in sorted(self.oauth):
            state = self.oauth[user]
            self.check_oauth_user(user, context)
            if not state["registered"]:
                continue
            if not state["tokens"]:
                if new_logins == 0:
                    continue
                new_logins -= 1
            if state["tokens"]:
                self.checks += 1
                status, out, err = self.run(["token", "print", "--user", user, "--min-ttl", "86000", "--json"],
                                            home=self.ohome)
                if status == 0:
                    state.update(reported=("access", json.loads(out)["accessToken"]), spent=False)
                else:
                    self.oauth_refused(user, status, out, err, f"{context}: refresh of {user}")
            if not state["tokens"]:
                self.checks += 1
                status, out, err = self.run(["login", "--user", user, "--json"], home=self.ohome)
                if status != 0:
                    self.failures.add(f"{context}: login of {user} -> {status}: {out.strip()} {err.strip()}")
                    continue
                answer = json.loads(out)
                state.update(tokens=True, spent=False,
                             reported=("set", {k: answer.get(k) for k in ("expiresAt", "jkt", "bound", "tokenType")}))
            self.check_oauth_user(user, context + " after refresh")

    # The operations the crash phase kills, and how often each is picked. A new command is one more entry here
    # plus its op_ method.
    # Operations whose completed run ends in another status than 0: the --bound OAuth store refuses imported Bearer
    # tokens (76).
    EXPECTED_STATUS = {"token import": 76}

    OPERATIONS = [
        ("bind", "op_bind", 3),
        ("bind --journey", "op_bind_journey", 2),
        ("rebind", "op_rebind", 3),
        ("revoke", "op_revoke", 2),
        ("pin change", "op_pin_change", 3),
        ("sync", "op_sync", 2),
        ("master rotate", "op_master_rotate", 2),
        ("dcr register", "op_dcr_register", 2),
        ("login", "op_login", 1),
        ("token refresh", "op_token_refresh", 3),
        ("token refresh (at the spend)", "op_token_refresh_at_spend", 1),
        ("token import", "op_token_import", 1),
        ("sync (OAuth)", "op_oauth_sync", 2),
        ("master rotate (OAuth)", "op_oauth_master_rotate", 1),
    ]

    # With --tpm: signs (each one write, so one counter step), and writes killed between their commit and their
    # counter's increment by the TPM relay (Tests/tools/tpm_gate.py).
    TPM_OPERATIONS = [
        ("sign", "op_sign", 2),
        ("sign (at the counter's increment)", "op_sign_at_increment", 3),
        ("bind (at the counter's increment)", "op_bind_at_increment", 1),
        ("master rotate (at the counter's increment)", "op_master_rotate_at_increment", 1),
    ]

    def pick(self):
        names = [entry for entry in self.OPERATIONS]
        weights = [entry[2] for entry in names]
        return self.rng.choices(names, weights)[0]

    # ---- phases -------------------------------------------------------------------------------------

    def operation(self, method):
        """An operation's (argv, stdin, done, home)."""
        made = getattr(self, method)()
        return made if len(made) == 4 else made + (self.home,)

    def setup(self, server_user_count, tpm_tcti=None, sealed_master_key=False):
        backend = ["--key-backend", "tpm", "--tpm-tcti", tpm_tcti] if tpm_tcti else []
        if sealed_master_key:
            backend += ["--master-key", "tpm"]
        self.must(["init", "--device-name", "stress"] + FAST_ARGON2 + backend)
        self.must(["init", "--device-name", "stress oauth"] + FAST_ARGON2, home=self.ohome)
        self.server_users = ["srv%d" % i for i in range(server_user_count)]
        self.start_server(self.server_users)
        for _ in range(2):
            args, stdin, done, home = self.op_dcr_register()
            status, out, err = self.run(args, stdin, home=home)
            done(status, out, False)
        for user in sorted(self.oauth):
            args = ["login", "--user", user, "--json"]
            answer = json.loads(self.must(args, home=self.ohome))
            self.oauth[user].update(tokens=True, reported=("set", {k: answer.get(k) for k in
                                                                  ("expiresAt", "jkt", "bound", "tokenType")}))
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
            args, stdin, done, home = self.operation(method)
            self.kill_trigger = None  # calibration runs every operation to its end
            if self.tpm_arm and os.path.exists(self.tpm_arm):
                os.unlink(self.tpm_arm)
            started = time.monotonic()
            status, out, err = self.run(args, stdin, home=home)
            durations[name] = max(0.05, time.monotonic() - started)
            done(status, out, False)
            if status != self.EXPECTED_STATUS.get(name, 0):
                self.failures.add(f"calibration: keymgr {' '.join(args)} -> {status}: {out.strip()} {err.strip()}")
        return durations

    def crash_phase(self, target_kills, round_size, durations):
        attempts = 0
        by_operation = {}
        while self.kills < target_kills and attempts < target_kills * 6:
            attempts += 1
            name, method, _ = self.pick()
            args, stdin, done, home = self.operation(method)
            delay = self.rng.uniform(0.0, durations[name] * 1.1)
            proc = subprocess.Popen(self.argv(args, home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self.env)
            self._feed(proc, stdin)  # a few bytes: the pipe takes them without blocking
            trigger, self.kill_trigger = self.kill_trigger, None
            if trigger is None:
                time.sleep(delay)
            else:  # the operation names its moment: kill as soon as it has come
                deadline = time.monotonic() + 30
                while proc.poll() is None and time.monotonic() < deadline and not trigger():
                    pass
                delay = -1.0
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=120)
            status = proc.returncode
            # Killed by the harness, or by the TPM relay at the moment the operation named (else it finished
            # between the poll and the signal).
            killed = status == -signal.SIGKILL
            if killed:
                self.kills += 1
                by_operation[name] = by_operation.get(name, 0) + 1
            elif status not in (0,) and not (name == "revoke" and status == 66) and home == self.home:
                self.failures.add(f"keymgr {' '.join(args)} -> {status} unkilled: {out.decode().strip()} "
                                  f"{err.decode().strip()}")
            done(status, out.decode(errors="replace"), killed)
            if self.verbose:
                print(f"  {name:15s} delay {delay:.3f}s {'KILLED' if killed else 'exit %d' % status}", flush=True)
            self.check_store(f"after {name} ({'killed' if killed else 'exit %d' % status})", home and os.path.join(home, "keymgr.db"))
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
        # The OAuth store: users every worker refreshes at once (single-flight), counted against the server.
        shared = sorted(u for u, st in self.oauth.items() if st["registered"] and st["tokens"])[:3]
        obefore = self.audit_counts(self.odb)
        server_before = {row["token"]: row for row in self.admin("GET", "tokens")["result"]}

        def worker(index):
            rng = random.Random(self.rng.getrandbits(64))
            mine = {}  # user -> (kid, pin or None)
            tally = tallies[index]
            serial = 0

            def note(key):
                tally[key] = tally.get(key, 0) + 1

            while time.monotonic() < deadline:
                choice = rng.random()
                if choice < 0.4 and shared:
                    self.soak_oauth(rng, index, shared, tally, note)
                    continue
                choice = rng.random()
                if choice < 0.3 or not mine:
                    serial += 1
                    user = f"soak-{index}-{serial}"
                    pin = acceptable_pin(rng) if rng.random() < 0.5 else None
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
                    new = acceptable_pin(rng)
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
                    new = acceptable_pin(rng)
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

        self.soak_tallies = tallies
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
        self.check_oauth_soak(totals, obefore, server_before)
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

    def audit_counts(self, db=None):
        return {row["event"]: row["n"] for row in self.sql("SELECT event, count(*) AS n FROM audit_events GROUP BY event", db)}

    def soak_oauth(self, rng, index, shared, tally, note):
        """One OAuth command in the soak: a refresh of a user every worker refreshes, a new registration, a sync
        (whose registration reads rotate every client's credentials meanwhile) or a master rotation."""
        choice = rng.random()
        if choice < 0.55:
            user = rng.choice(shared)
            printing = rng.random() < 0.5
            args = (["token", "print", "--user", user, "--min-ttl", "86000", "--json"] if printing
                    else ["token", "refresh", "--user", user, "--json"])
            status, out, err = self.run(args, home=self.ohome)
            if self.soak_outcome(args, status, out, err, tally):
                note("token refresh (print or refresh) succeeded")
                with self.failures.lock:
                    self.oauth[user]["reported"] = None  # another worker may have refreshed since
        elif choice < 0.7:
            serial = tally.get("_oauth_serial", 0) + 1
            tally["_oauth_serial"] = serial
            user = f"soak-oauth-{index}-{serial}"
            args = ["dcr", "register", "--user", user, "--software-id", "keymgr-template", "--json"]
            status, out, err = self.run(args, home=self.ohome)
            if self.soak_outcome(args, status, out, err, tally):
                note("dcr.registered")
                tally.setdefault("_clients", {})[user] = json.loads(out)["clientId"]
        elif choice < 0.95:
            args = ["sync", "--json"]
            status, out, err = self.run(args, home=self.ohome)
            if status == 75 and "another `keymgr sync`" in err:
                note("OAuth sync lease held (expected with overlapping syncs)")
            elif self.soak_outcome(args, status, out, err, tally):
                wiped = json.loads(out).get("registrationsWiped")
                if wiped:
                    self.failures.add(f"soak: an OAuth sync wiped {wiped}")
                note("OAuth sync")
        else:
            args = ["master", "rotate", "--yes", "--json"]
            status, out, err = self.run(args, home=self.ohome)
            if status == 75 and "another `keymgr master rotate`" in err:
                note("OAuth rotation lock held (expected with overlapping rotations)")
            elif self.soak_outcome(args, status, out, err, tally):
                note("OAuth master rotated")

    def check_oauth_soak(self, totals, before, server_before):
        """After the soak: one `tokens.refreshed` entry per refresh the server saw, no refresh token presented
        twice, every registration reported is stored, every shared user's stored tokens are live."""
        after = self.audit_counts(self.odb)
        server_after = self.admin("GET", "tokens")["result"]
        self.checks += 1
        spent = sum(1 for row in server_after if row.get("kind") == "refresh" and row.get("status") == "used"
                    and server_before.get(row["token"], {}).get("status") != "used")
        recorded = after.get("tokens.refreshed", 0) - before.get("tokens.refreshed", 0)
        if spent != recorded:
            self.failures.add(f"soak: the server saw {spent} refreshes but the OAuth store audited {recorded}")
        totals["refreshes the server saw"] = spent
        self.checks += 1
        for row in server_after:
            earlier = server_before.get(row["token"], {}).get("presentations", 0)
            if row.get("kind") == "refresh" and row.get("presentations", 0) > 1 and row.get("presentations", 0) > earlier:
                self.failures.add(f"soak: a refresh token of {row.get('client_id')} was presented "
                                  f"{row.get('presentations')} times (two processes spent it)")
        self.checks += 1
        recorded = after.get("dcr.registered", 0) - before.get("dcr.registered", 0)
        if recorded != totals.get("dcr.registered", 0):
            self.failures.add(f"soak: {totals.get('dcr.registered', 0)} successful dcr register but {recorded} audit entries")
        # Every reported registration is stored; the harness tracks them from now on.
        registrations, _ = self.oauth_rows()
        for tally in self.soak_tallies:
            for user, client in tally.get("_clients", {}).items():
                self.checks += 1
                if registrations.get(user, {}).get("client_id") != client:
                    self.failures.add(f"soak: {user}'s reported client {client} is not the stored one")
                state = self.new_oauth_user()
                state.update(registered=True, client=client)
                self.oauth[user] = state
                self.client_users[client] = user
        for user in sorted(self.oauth):
            self.check_oauth_user(user, "after the soak")


def start_swtpm(state):
    """A swtpm for the run (state in `state`, a Unix socket there, under `timeout`); its process and TCTI."""
    os.makedirs(state)
    socket = os.path.join(state, "tpm.sock")
    process = subprocess.Popen(["timeout", "3600", "swtpm", "socket", "--tpm2", "--tpmstate", f"dir={state}",
                                "--server", f"type=unixio,path={socket}", "--ctrl", f"type=unixio,path={socket}.ctrl",
                                "--flags", "not-need-init,startup-clear"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(socket):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("swtpm did not start (run `make deps`)")
        time.sleep(0.01)
    return process, f"swtpm:path={socket}"


def start_tpm_relay(state, target_tcti):
    """The TPM relay (Tests/tools/tpm_gate.py) in front of the run's swtpm: its process, TCTI and arm file."""
    os.makedirs(state)
    socket = os.path.join(state, "tpm.sock")
    arm = os.path.join(state, "arm")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "tools", "tpm_gate.py")
    process = subprocess.Popen(["timeout", "3600", sys.executable, script, socket,
                                target_tcti[len("swtpm:path="):], os.devnull, arm],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not (os.path.exists(socket) and os.path.exists(socket + ".ctrl")):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("the TPM relay did not start")
        time.sleep(0.01)
    return process, f"swtpm:path={socket}", arm


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", required=True, help="directory holding keymgr-core and keymgr-refserver")
    parser.add_argument("--kills", type=int, default=220, help="SIGKILLs in the crash phase (default 220)")
    parser.add_argument("--soak-seconds", type=float, default=60, help="length of the soak (default 60)")
    parser.add_argument("--round", type=int, default=25, help="kills between full checks (default 25)")
    parser.add_argument("--server-users", type=int, default=4)
    parser.add_argument("--seed", type=int, help="replay a run")
    parser.add_argument("--short", action="store_true", help="the form `make test` runs: 30 kills, 20 s soak")
    parser.add_argument("--soak-rotate", action=argparse.BooleanOptionalAction, default=True,
                        help="mix `master rotate` into the soak (default: yes)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--tpm", action="store_true",
                        help="keep the main store's keys in a swtpm of the run's own (`make stress STRESS_ARGS=--tpm`)")
    parser.add_argument("--master-key-tpm", action="store_true",
                        help="with --tpm, also seal the main store's master key to that swtpm (`init --master-key tpm`)")
    parser.add_argument("--refserver", help="the keymgr-refserver to run (default: the one in --bin-dir)")
    parser.add_argument("--verbose", action="store_true")
    options = parser.parse_args()
    if options.short:
        options.kills, options.soak_seconds, options.round = 30, 20, 15
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2 ** 32)
    print(f"seed {seed} (replay: {sys.argv[0]} --seed {seed}{' --short' if options.short else ''})", flush=True)
    # keymgr-core, the program that opens and writes the store: the `keymgr` client only execs it in embedded mode,
    # and a kill in the client's millisecond before the exec would test nothing.
    binary = os.path.join(options.bin_dir, "keymgr-core")
    refserver = options.refserver or os.path.join(options.bin_dir, "keymgr-refserver")
    for path in (binary, refserver, SQLITE3):
        if not os.access(path, os.X_OK):
            print(f"stress: {path} is missing: build first (swift build)", file=sys.stderr)
            return 1
    root = tempfile.mkdtemp(prefix="keymgr-stress-")
    harness = Harness(binary, refserver, root, random.Random(seed), options.verbose)
    swtpm = None
    relay = None
    try:
        tcti = None
        if options.tpm:
            swtpm, tcti = start_swtpm(os.path.join(root, "tpm"))
            relay, tcti, harness.tpm_arm = start_tpm_relay(os.path.join(root, "tpm-relay"), tcti)
            harness.OPERATIONS = harness.OPERATIONS + harness.TPM_OPERATIONS
        harness.setup(options.server_users, tcti, sealed_master_key=options.tpm and options.master_key_tpm)
        durations = harness.calibrate()
        print("operation times (s): " + ", ".join(f"{k} {v:.2f}" for k, v in durations.items()), flush=True)
        by_operation = harness.crash_phase(options.kills, options.round, durations)
        print("kills by operation: " + ", ".join(f"{k} {v}" for k, v in sorted(by_operation.items())), flush=True)
        if harness.kills < options.kills:
            harness.failures.add(f"only {harness.kills} kills landed (wanted {options.kills})")
        totals = harness.soak_phase(options.soak_seconds, rotate=options.soak_rotate)
        print("soak outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())), flush=True)
        print("outcomes a kill explains: " + (", ".join(f"{k} {v}" for k, v in sorted(harness.explained.items()))
                                              or "none"), flush=True)
    except Exception as error:
        harness.failures.add(f"harness stopped: {error!r}")
    finally:
        harness.stop_server()
        for process in (relay, swtpm):
            if process is not None:
                process.terminate()
                process.wait()
        if options.keep or harness.failures.items:
            print(f"store kept in {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    failures = len(harness.failures.items)
    print(f"{harness.kills} kills, {harness.checks} checks, {failures} failures", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
