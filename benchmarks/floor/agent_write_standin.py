#!/usr/bin/env python3
"""A stand-in agent for the floor of concurrent writing requests (benchmarks/agent, agentconc): it does the least
work a durable request through a forking agent needs, and nothing of keymgr's. The server forks one child per
connection, as keymgr's agent does; the child reads the request frame (closing the passed descriptors), takes the
writers' queue (an exclusive flock on DB-lock, as keymgr's writers do), writes one row to a SQLite database in WAL
mode with synchronous=FULL (BEGIN IMMEDIATE, INSERT, COMMIT: one fdatasync'd WAL append), lets the queue go and
answers {"status":0}. What 8 clients at once cost against it, next to one client alone, is what the machine's
cores and disk allow for such requests.
With --no-queue the child skips the flock and waits for SQLite's write lock in SQLite's own busy handler
(busy_timeout 5 s, its growing back-off), as keymgr's writers did before the queue: to see what the queue changes.
Usage: agent_write_standin.py SOCKET_PATH DB [--no-queue] (serves until killed)."""
import fcntl
import os
import signal
import socket
import sqlite3
import struct
import sys

path, database = sys.argv[1], sys.argv[2]
queued = "--no-queue" not in sys.argv[3:]
setup = sqlite3.connect(database, isolation_level=None)
setup.execute("PRAGMA journal_mode = WAL")
setup.execute("CREATE TABLE IF NOT EXISTS request (id INTEGER PRIMARY KEY, at REAL NOT NULL)")
setup.close()
if os.path.exists(path):
    os.unlink(path)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(64)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
answer = b'{"status":0}'
frame = struct.pack(">I", len(answer)) + answer


def serve(connection):
    data, fds, _, _ = socket.recv_fds(connection, 4 + 65536, 9)
    for fd in fds:
        os.close(fd)
    if len(data) < 4:
        return
    (length,) = struct.unpack(">I", data[:4])
    while len(data) < 4 + length:
        chunk = connection.recv(4 + length - len(data))
        if not chunk:
            return
        data += chunk
    db = sqlite3.connect(database, isolation_level=None, timeout=5)
    db.execute("PRAGMA synchronous = FULL")
    if queued:
        queue = os.open(database + "-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(queue, fcntl.LOCK_EX)
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO request (at) VALUES (julianday('now'))")
    db.execute("COMMIT")
    if queued:
        os.close(queue)
    db.close()
    connection.sendall(frame)


while True:
    connection, _ = listener.accept()
    if os.fork() == 0:
        listener.close()
        try:
            serve(connection)
        finally:
            os._exit(0)
    connection.close()
