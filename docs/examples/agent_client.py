#!/usr/bin/env python3
"""A complete client of keymgr's agent protocol, version 1 (docs/agent-protocol.md), in Python 3.9+.

Runs one keymgr command through the agent, as the OS user running this script (the agent asks the kernel who is
calling; nothing here can claim otherwise), with this process's stdin, stdout and stderr, and exits with the
command's status:

    python3 agent_client.py [--socket PATH] [--json-errors] -- sign --user alice --challenge abc

As a library:

    status, error = run(["status", "--json"], socket_path="/run/keymgr/keymgr.sock")

`error` is None when the agent ran the command (its output went to the descriptors passed), else the agent's
{"code": ..., "message": ...} saying why it did not.
"""

import json
import os
import socket
import struct
import sys

PROTOCOL_VERSION = 1
MAX_FRAME = 65536
MAX_FDS = 8
DEFAULT_SOCKET = "/run/keymgr/keymgr.sock"


class ProtocolError(Exception):
    """The agent's answer is not a frame of the protocol."""


def encode_request(arguments, fd_numbers, terminal, columns=None, files=()):
    """The request's JSON body (UTF-8 bytes). `files`: (option, path, access) of each named file passed."""
    request = {
        "version": PROTOCOL_VERSION,
        "arguments": list(arguments),
        "fds": list(fd_numbers),
        "terminal": bool(terminal),
    }
    if columns is not None:
        request["columns"] = int(columns)
    if files:
        request["files"] = [{"access": access, "option": option, "path": path} for option, path, access in files]
    body = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if not 1 <= len(body) <= MAX_FRAME:
        raise ValueError(f"the request is {len(body)} bytes; a frame carries 1 to {MAX_FRAME}")
    return body


def _receive_exactly(connection, count):
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ProtocolError("the agent closed the connection without an answer")
        data += chunk
    return data


def _reject_duplicates(pairs):
    names = [name for name, _ in pairs]
    if len(names) != len(set(names)):
        raise ProtocolError("the response names a member twice")
    return dict(pairs)


def read_response(connection):
    """(status, error or None) from the agent's one response frame."""
    (length,) = struct.unpack(">I", _receive_exactly(connection, 4))
    if not 1 <= length <= MAX_FRAME:
        raise ProtocolError(f"the response frame announces {length} bytes")
    body = _receive_exactly(connection, length)
    response = json.loads(body.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    status = response.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 0 <= status <= 255:
        raise ProtocolError("the response has no exit status")
    error = response.get("error")
    if error is not None and not (isinstance(error, dict) and isinstance(error.get("code"), str)
                                  and isinstance(error.get("message"), str)):
        raise ProtocolError("the response's error is not {code, message}")
    return status, error


def run(arguments, socket_path=DEFAULT_SOCKET, fds=None, terminal=None, columns=None, files=()):
    """Runs `arguments` (without the program name) through the agent at `socket_path`.

    `fds` maps the number each descriptor takes in the command to a descriptor of this process; by default
    {0: 0, 1: 1, 2: 2}. Add e.g. {5: pin_read_end} for `--pin-fd 5`. `terminal` is an open descriptor of the
    person's terminal for no-echo prompts, or None. `files`: for each file an option of `arguments` names
    (`--metadata FILE`; docs/agent-protocol.md, "Named files"), (option, path, access, descriptor), the file opened
    by this process with its own rights: access "read", or "create" (opened O_CREAT|O_EXCL|O_WRONLY, mode 0600).
    The agent never opens those names itself. Returns (status, error)."""
    if fds is None:
        fds = {0: 0, 1: 1, 2: 2}
    if not {0, 1, 2} <= set(fds):
        raise ValueError("descriptors 0, 1 and 2 are always passed")
    if len(fds) > MAX_FDS:
        raise ValueError(f"at most {MAX_FDS} descriptors")
    numbers = list(fds)
    passed = [fds[number] for number in numbers]
    if terminal is not None:
        passed.append(terminal)
    passed += [descriptor for _, _, _, descriptor in files]
    body = encode_request(arguments, numbers, terminal is not None, columns,
                          [(option, path, access) for option, path, access, _ in files])
    frame = struct.pack(">I", len(body)) + body
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(socket_path)
        # The descriptors travel with the frame's first bytes; the rest of the frame follows if the first send
        # was short.
        sent = socket.send_fds(connection, [frame], passed)
        if sent < len(frame):
            connection.sendall(frame[sent:])
        return read_response(connection)


def main(argv):
    socket_path = os.environ.get("KEYMGR_SOCKET") or DEFAULT_SOCKET
    json_errors = False
    while argv and argv[0] != "--":
        option = argv.pop(0)
        if option == "--socket" and argv:
            socket_path = argv.pop(0)
        elif option == "--json-errors":
            json_errors = True
        else:
            print("usage: agent_client.py [--socket PATH] [--json-errors] -- keymgr-arguments...", file=sys.stderr)
            return 64
    arguments = argv[1:]
    terminal = None
    try:
        terminal = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        pass
    columns = os.environ.get("COLUMNS")
    columns = int(columns) if columns and columns.isdigit() and int(columns) > 0 else None
    try:
        status, error = run(arguments, socket_path, terminal=terminal, columns=columns)
    except (FileNotFoundError, ConnectionRefusedError):
        print(f"agent_client.py: the keymgr agent at {socket_path} is not running", file=sys.stderr)
        return 69
    except (ProtocolError, ValueError, OSError) as problem:
        print(f"agent_client.py: {problem}", file=sys.stderr)
        return 69
    if error is not None:
        print(f"keymgr: {error['message']}", file=sys.stderr)
        options = arguments[:arguments.index("--")] if "--" in arguments else arguments
        if json_errors or "--json" in options:
            print(json.dumps({"error": {"code": error["code"], "message": error["message"]}},
                             ensure_ascii=False, separators=(",", ":"), sort_keys=True))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
