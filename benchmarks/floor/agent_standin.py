#!/usr/bin/env python3
"""A stand-in agent for the client's floor (benchmarks/agent): reads each request frame with its descriptors,
closes them, and answers {"status":0} at once, without running anything. What `keymgr --socket S …` costs against
it is the client's start, the connection and the frame round trip: the least any request through an agent costs.
Usage: agent_standin.py SOCKET_PATH (serves until killed)."""
import os
import socket
import struct
import sys

path = sys.argv[1]
if os.path.exists(path):
    os.unlink(path)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(64)
answer = b'{"status":0}'
frame = struct.pack(">I", len(answer)) + answer
while True:
    connection, _ = listener.accept()
    with connection:
        data, fds, _, _ = socket.recv_fds(connection, 4 + 65536, 9)
        for fd in fds:
            os.close(fd)
        if len(data) < 4:
            continue
        (length,) = struct.unpack(">I", data[:4])
        while len(data) < 4 + length:
            chunk = connection.recv(4 + length - len(data))
            if not chunk:
                break
            data += chunk
        connection.sendall(frame)
