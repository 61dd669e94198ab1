#!/usr/bin/env python3
"""A relay in front of a swtpm's Unix sockets, for tests: keymgr talks to LISTEN (and LISTEN.ctrl), the relay to
TARGET (and TARGET.ctrl). It appends one line per TPM command to LOG ("<command code in hex> <sender's pid>"), and
when the file ARM holds a command code, it SIGKILLs the process that sends the next command with that code, before
the TPM sees it, removes ARM and logs "killed <code> <pid>": a crash at an exact point of keymgr's work, such as
between a commit and the rollback counter's increment. When ARM holds "stall <code>", the relay instead swallows the
next command with that code and never answers it (a TPM that accepts the connection and then says nothing), logging
"stalled <code> <pid>", until the client hangs up.

usage: tpm_gate.py LISTEN TARGET LOG ARM
"""
import os
import signal
import socket
import struct
import sys
import threading

LISTEN, TARGET, LOG, ARM = sys.argv[1:5]
log_lock = threading.Lock()


def note(line):
    with log_lock, open(LOG, "a") as log:
        log.write(line + "\n")


def receive(sock, count):
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def close(*socks):
    """Shuts down and closes both ends, so swtpm (which serves one connection at a time) is never left waiting on
    a connection whose client is gone."""
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


def pump(source, sink):
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
    except OSError:  # a killed client resets its connection
        pass
    finally:
        close(source, sink)


def armed_code():
    """(code, "kill" or "stall") armed in ARM, or (None, None)."""
    try:
        with open(ARM) as armed:
            words = armed.read().split()
        if len(words) == 2 and words[0] == "stall":
            return int(words[1], 16), "stall"
        return int(words[0], 16), "kill"
    except (OSError, ValueError, IndexError):
        return None, None


def relay_commands(client, upstream):
    """keymgr to the TPM, one command (header: tag, size, code) at a time; the answers go back as they come."""
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
    try:
        pid = struct.unpack("3i", client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
        while True:
            header = receive(client, 10)
            if header is None:
                break
            _, size, code = struct.unpack(">HII", header)
            body = receive(client, size - 10) if size > 10 else b""
            if body is None:
                break
            armed, action = armed_code()
            if armed == code and action == "stall":
                os.unlink(ARM)
                note(f"stalled 0x{code:x} {pid}")
                while receive(client, 1) is not None:
                    pass
                break
            if armed == code:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.unlink(ARM)
                note(f"killed 0x{code:x} {pid}")
                break
            note(f"0x{code:x} {pid}")
            upstream.sendall(header + body)
    except OSError:  # a killed client resets its connection
        pass
    finally:
        close(client, upstream)


def handle(client, target, commands):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(target)
    except OSError:
        close(client, upstream)
        return
    if commands:
        relay_commands(client, upstream)
    else:
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)


def serve(listen, target, commands):
    if os.path.exists(listen):
        os.unlink(listen)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(listen)
    server.listen(64)
    while True:
        client, _ = server.accept()
        threading.Thread(target=handle, args=(client, target, commands), daemon=True).start()


threading.Thread(target=serve, args=(LISTEN + ".ctrl", TARGET + ".ctrl", False), daemon=True).start()
serve(LISTEN, TARGET, True)
