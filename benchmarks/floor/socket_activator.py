#!/usr/bin/env python3
"""What systemd's keymgr.socket does, for the cold-start row (benchmarks/agent agentcold):

    socket_activator.py SOCKET PIDFILE PROGRAM ARGUMENTS...

binds and listens on SOCKET, and whenever a connection waits and no child runs, starts PROGRAM ARGUMENTS with the
listening socket as descriptor 3 (LISTEN_FDS=1, LISTEN_PID its pid), writes the child's pid to PIDFILE while it runs
and removes PIDFILE when it exits (an agent's --idle-exit). The socket stays open across the child's exits, so the
next connection starts a new child: a cold start, as after an idle exit or a boot."""
import os
import select
import socket
import sys

path, pidfile, program = sys.argv[1], sys.argv[2], sys.argv[3:]
if os.path.exists(path):
    os.unlink(path)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(128)
while True:
    select.select([listener], [], [])
    pid = os.fork()
    if pid == 0:
        os.dup2(listener.fileno(), 3)
        os.set_inheritable(3, True)
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
        os.execve(program[0], program, env)
    with open(pidfile + ".tmp", "w") as handle:
        handle.write(str(pid))
    os.rename(pidfile + ".tmp", pidfile)
    os.waitpid(pid, 0)
    os.unlink(pidfile)
