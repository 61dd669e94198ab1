// `keymgr`, the lean client: it decides between the agent and embedded mode, and in agent mode passes the command
// line and the caller's descriptors to the agent and exits with the agent's status. It links Glibc, AgentWire and
// CAgentSocket only (no Foundation, GRDB or OpenSSL), so that a command through the agent starts fast.
//
// Mode choice (docs/agent-protocol.md, "Which mode"): agent mode with `--socket PATH` or `KEYMGR_SOCKET`, or when
// neither `--home` nor `KEYMGR_HOME` is given and the default socket exists; otherwise, and always for `agent`,
// the full program `keymgr-core` runs the command (execv, same argv).

import AgentWire
import CAgentSocket
import Glibc

let defaultSocket = "/run/keymgr/keymgr.sock"

let arguments = ClientArguments(CommandLine.arguments.dropFirst())
let environmentSocket = ClientEnvironment.value("KEYMGR_SOCKET")

if arguments.subcommand == "agent" { Embedded.run() }
if let failure = arguments.failure { ClientFailure.exit(failure, json: arguments.json) }
if arguments.home != nil && (arguments.socket != nil || environmentSocket != nil) {
    ClientFailure.exit(.init(code: "usage", status: 64, message: arguments.socket != nil
        ? "--home and --socket cannot be used together: the agent serves one store; leave out --home to use the agent, or --socket to open the store directly"
        : "--home cannot be used with KEYMGR_SOCKET set: the agent serves one store; unset KEYMGR_SOCKET to open the store at --home directly"),
        json: arguments.json)
}

if let path = arguments.socket ?? environmentSocket {
    exit(AgentSession(socketPath: path, explicit: true, arguments: arguments).run())
}
if arguments.home == nil, ClientEnvironment.value("KEYMGR_HOME") == nil, ClientFiles.exists(defaultSocket) {
    exit(AgentSession(socketPath: defaultSocket, explicit: false, arguments: arguments).run())
}
Embedded.run()
