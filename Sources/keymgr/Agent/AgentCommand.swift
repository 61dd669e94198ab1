import AgentWire
import ArgumentParser
import CAgentSocket
import Foundation
import KeyManager

/// `keymgr agent`: serve the store to the people on this device over a Unix socket, each as themselves.
struct AgentCommand: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Serve the store to the people on this device over a Unix socket, each as themselves.",
        discussion: """
            Runs in the foreground as the store's owner. Each connection is served by a worker process of its own, \
            which runs the client's command line for the caller the kernel reports on the socket (SO_PEERCRED): \
            that person is the audit actor and the verifiers' {osUser}, and the policy decides what they may do. \
            The socket comes from systemd (LISTEN_FDS) when it passes one, else keymgr binds --socket. \
            See docs/agent.md.

            Example:
              keymgr agent --home /var/lib/keymgr --socket /run/keymgr/keymgr.sock --idle-exit 300
            """)

    static let defaultSocket = "/run/keymgr/keymgr.sock"
    static let defaultPolicy = "/etc/keymgr/policy.toml"

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("The socket to bind when systemd passes none (default: \(defaultSocket)).", valueName: "path"),
            completion: .file())
    var socket: String?

    @Option(help: ArgumentHelp("The policy file (default: \(defaultPolicy)).", valueName: "file"), completion: .file())
    var policy: String?

    @Option(name: .customLong("idle-exit"),
            help: ArgumentHelp("Exit after this many seconds with no connection (default: never).", valueName: "seconds"))
    var idleExit: Int?

    @Option(help: ArgumentHelp("The most requests served at once.", valueName: "n"))
    var maxWorkers: Int = AgentServer.Limits.standard.workers

    @Option(help: ArgumentHelp("The most requests served at once for one uid.", valueName: "n"))
    var maxWorkersPerUser: Int = AgentServer.Limits.standard.workersPerUser

    @Option(name: .customLong("warm-workers"),
            help: ArgumentHelp("How many workers wait with the store already open for the next requests (0 to \(AgentWarmPool.maximum); 0: a worker is forked for each request).",
                               valueName: "n"))
    var warmWorkers: Int = AgentWarmPool.standard

    @Flag(name: .customLong("check-policy"),
          help: ArgumentHelp("Check the policy file (FILE, else --policy, else \(defaultPolicy)) as the agent would load it, and exit: 0 when it is good, 78 naming file:line of the first mistake."))
    var checkPolicy = false

    @Argument(help: ArgumentHelp("With --check-policy: the policy file to check.", valueName: "file"), completion: .file())
    var policyToCheck: String?

    func validate() throws {
        if policyToCheck != nil && !checkPolicy {
            throw ValidationError("a file after `agent` is the policy to check: write `keymgr agent --check-policy FILE`")
        }
        if warmWorkers < 0 || warmWorkers > AgentWarmPool.maximum {
            throw ValidationError("--warm-workers needs a number from 0 to \(AgentWarmPool.maximum)")
        }
        if let idleExit, idleExit < 1 { throw ValidationError("--idle-exit needs a number of seconds (1 or more)") }
        if maxWorkers < 1 { throw ValidationError("--max-workers needs 1 or more") }
        if maxWorkersPerUser < 1 { throw ValidationError("--max-workers-per-user needs 1 or more") }
        if let socket, socket.isEmpty { throw ValidationError("--socket needs a path") }
    }

    func run(in context: CommandContext) throws {
        if checkPolicy { return try check(policyToCheck ?? policy ?? Self.defaultPolicy, in: context) }
        AgentProcessName.set("keymgr-agent")
        // The directories above what the agent trusts, before anything is read from them (docs/agent.md, "Start").
        try SafePath.checkStore(home: globals.storeHome(in: context), environment: context.environment, owner: geteuid())
        // The store's keeper checks the store while the policy loads (two processes, two cores).
        let keeper = try startKeeper(in: context)
        let policyFile = policy ?? Self.defaultPolicy
        let policy: AgentPolicy
        do {
            policy = try AgentGate.load(policyFile: policyFile)
        } catch {
            try keeper.wait()
            return try serveWithoutPolicy(error, file: policyFile, in: context)
        }
        // Started by socket activation, a person waits on the socket: the agent serves at once, and the keeper's
        // answer arrives in the serving loop (a store that cannot be served still ends the agent with 78). Started
        // any other way, no socket is bound before the store is known good.
        let activated = AgentListener.passedBySystemd(environment: context.environment)
        // What every worker would otherwise do on first use, done once in the agent and inherited by every worker
        // forked after it (docs/agent.md, "Speed"). Started by socket activation, a person waits: the agent serves
        // first, and runs these steps while no request is being served. Started any other way, before it listens.
        let console = globals.console(in: context)
        var warmUp = Self.argumentParserWarmUp() + [
            { OpenSSLLibrary.prepareForWorkers() },
            {
                if KeyManager.rehearseForWorkers() {
                    console.detail("rehearsed a request on a scratch store: every worker starts past its first use")
                } else {
                    console.detail("no rehearsal (no scratch store in the temporary directory): each worker pays its own first use")
                }
            },
        ]
        if !activated {
            try keeper.wait()
            for step in warmUp { step() }
            warmUp = []
        }
        let listener = try AgentListener.open(path: socket ?? Self.defaultSocket, environment: context.environment)
        defer { listener.close() }
        AgentGate.socket = listener.path
        globals.console(in: context).detail("serving \(globals.storeHome(in: context).url.path) on \(listener.name)")
        let server = AgentServer(
            listener: listener,
            limits: .init(workers: maxWorkers, workersPerUser: maxWorkersPerUser),
            idleExit: idleExit,
            home: globals.home,
            environment: context.environment,
            policy: policy,
            warmWorkers: warmWorkers,
            warmUp: warmUp,
            keeper: activated ? keeper.ready : -1)
        if !activated { Self.notifyReady(environment: context.environment) }
        try server.serve()
    }

    /// `--check-policy`: loads `file` exactly as the agent does (owner, mode, syntax, rules) and says so, like
    /// `visudo -c`. Run as root, the file may be owned by root or by the agent's user, as the agent itself accepts.
    private func check(_ file: String, in context: CommandContext) throws {
        var agentUID = getuid()
        if agentUID == 0, let user = getpwnam("keymgr") { agentUID = user.pointee.pw_uid }
        let loaded = try AgentPolicy.load(path: file, agentUID: agentUID)
        let rules = loaded.rules.count
        context.streams.output.write("\(file): parsed OK (\(rules) rule\(rules == 1 ? "" : "s"))\n")
    }

    /// The policy does not load. Started by systemd's socket activation for a waiting connection, the agent answers
    /// every request 78 with the policy's mistake (until it is fixed and the agent restarted, or it exits idle):
    /// exiting instead would drop the connection, and systemd, retrying for the next one, would soon stop the socket
    /// (its start limit). Started any other way (`systemctl restart`, by hand) it fails, so the start fails.
    private func serveWithoutPolicy(_ failure: any Error, file: String, in context: CommandContext) throws {
        let listener = try AgentListener.open(path: socket ?? Self.defaultSocket, environment: context.environment)
        defer { listener.close() }
        guard listener.bound == nil, agent_socket_has_pending_connection(listener.descriptor) == 1 else { throw failure }
        let reason = PrintableText.stripped((failure as? any KeymgrFailure)?.message ?? String(describing: failure))
        context.streams.error.write("keymgr: \(reason)\nkeymgr: socket activation with a policy that does not load: "
            + "every request is answered 78 until the policy is fixed (`keymgr agent --check-policy`) and the agent restarted\n")
        let server = AgentServer(
            listener: listener,
            limits: .init(workers: maxWorkers, workersPerUser: maxWorkersPerUser),
            idleExit: idleExit,
            home: globals.home,
            environment: context.environment,
            unavailable: "the agent cannot serve: its policy does not load (\(reason)): "
                + "ask the device's administrator to fix \(file)")
        Self.notifyReady(environment: context.environment)
        try server.serve()
    }

    /// Tells systemd the agent listens (`Type=notify`: sd_notify's READY=1 on $NOTIFY_SOCKET), so that
    /// `systemctl start` and `restart` return once it serves, and fail when it exits first.
    static func notifyReady(environment: [String: String]) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty else { return }
        _ = agent_notify(path, "READY=1\nSTATUS=serving\n")
        unsetenv("NOTIFY_SOCKET")  // not the workers' to use
    }

    /// Parses every command once (each fails for want of its arguments), one step per command: the Swift runtime's
    /// type and conformance look-ups the argument parser's reflection makes (and the policy's cast of each parsed
    /// command) are cached in the process, and every worker forked after a step inherits them instead of paying
    /// them on its request.
    static func argumentParserWarmUp() -> [() -> Void] {
        var steps: [() -> Void] = []
        func walk(_ type: any ParsableCommand.Type, path: [String]) {
            let name = type.configuration.commandName ?? ""
            let here = path + [name]
            if type.configuration.subcommands.isEmpty {
                steps.append {
                    // The policy's cast of the parsed command (AgentGate), whether or not the command conforms: the
                    // runtime caches each answer, a "no" included, after scanning every conformance of the image.
                    if let parsed = try? Keymgr.parseAsRoot(here) { _ = parsed as? AgentTargeted }
                    _ = try? Keymgr.parseAsRoot(here + ["--json"])
                    _ = type is any AgentTargeted.Type
                    _ = AgentGate.operation(of: type)  // and the operations' table, built once here
                }
            }
            for sub in type.configuration.subcommands { walk(sub, path: here) }
        }
        for sub in Keymgr.configuration.subcommands { walk(sub, path: []) }
        // Sets the commands read on every request, built on first use.
        steps.append {
            _ = PrintableText.bidiControls.isEmpty
            _ = KeyStatus.usable.isEmpty
        }
        return steps
    }

    /// Opens the store and its master key in a child process, the store's keeper, so that no connection to the
    /// store, thread or key schedule of it stays in the agent that forks the workers. Fails with 78 saying what is wrong.
    ///
    /// The keeper then holds its connection open, idle (no transaction: checkpoints are not held back), until the
    /// agent is gone. While one connection is open SQLite keeps the WAL index valid, so a worker's open does not
    /// rebuild it by reading the whole WAL, as the first connection after the last one closed must (a worker exits
    /// without closing, like every keymgr process).
    private func startKeeper(in context: CommandContext) throws -> Keeper {
        let home = globals.storeHome(in: context)
        var ready: [Int32] = [-1, -1]  // keeper → agent: one byte once the store is open and checked
        var alive: [Int32] = [-1, -1]  // agent → keeper: end of file once the agent (and every worker) is gone
        guard pipe(&ready) == 0, pipe(&alive) == 0 else {
            throw CommandFailure(.failure, "cannot make a pipe to check the store: \(String(cString: strerror(errno)))")
        }
        let child = fork()
        if child == 0 {
            AgentProcessName.set("keymgr-keeper")
            Glibc.close(ready[0])
            Glibc.close(alive[1])
            let manager: KeyManager
            do {
                manager = try globals.openManager(in: context, readOnly: true)
                _ = try manager.status()
            } catch {
                let message = (error as? any KeymgrFailure)?.message ?? String(describing: error)
                context.streams.error.write("keymgr: the agent cannot serve the store in \(home.url.path): "
                    + "\(PrintableText.stripped(message))\n")
                _exit(FailureCode.config.exitStatus)
            }
            var byte: UInt8 = 1
            _ = write(ready[1], &byte, 1)
            Glibc.close(ready[1])
            withExtendedLifetime(manager) {
                while true {
                    let got = read(alive[0], &byte, 1)
                    if got == 0 || (got < 0 && errno != EINTR) { break }
                }
            }
            _exit(0)
        }
        Glibc.close(ready[1])
        Glibc.close(alive[0])
        guard child > 0 else {
            throw CommandFailure(.failure, "cannot start a process to check the store: \(String(cString: strerror(errno)))")
        }
        _ = fcntl(alive[1], F_SETFD, FD_CLOEXEC)  // held for the agent's life; workers close it
        _ = fcntl(ready[0], F_SETFD, FD_CLOEXEC)
        return Keeper(pid: child, ready: ready[0])
    }

    /// The store's keeper, forked by `startKeeper`: its pipe says (one byte) once it opened and checked the store,
    /// or ends without a byte when it could not (it said why on stderr and exited 78).
    struct Keeper {
        let pid: pid_t
        let ready: Int32

        /// Waits for the keeper's answer: returns once the store is open and checked; 78 otherwise.
        func wait() throws {
            var byte: UInt8 = 0
            var got: Int
            repeat { got = read(ready, &byte, 1) } while got < 0 && errno == EINTR
            Glibc.close(ready)
            guard got == 1 else {
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0, errno == EINTR {}
                throw ExitCode(FailureCode.config.exitStatus)
            }
        }
    }
}

/// The agent's listening socket: from systemd's socket activation, or bound here.
final class AgentListener {
    private(set) var descriptor: Int32
    /// The path bound here (removed when the agent stops listening), or nil for systemd's socket.
    let bound: String?
    var name: String { bound ?? "the socket systemd passed" }

    /// The socket's path: the one bound here, or the address of systemd's socket (nil when it has none).
    var path: String? {
        if let bound { return bound }
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let got = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard got == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let path = withUnsafeBytes(of: address.sun_path) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        return path.isEmpty ? nil : path
    }

    init(descriptor: Int32, bound: String?) {
        self.descriptor = descriptor
        self.bound = bound
    }

    /// Whether systemd passed this process its socket (`LISTEN_PID` is this process and `LISTEN_FDS` ≥ 1), as the
    /// agent's `environment` says.
    static func passedBySystemd(environment: [String: String]) -> Bool {
        guard let pid = environment["LISTEN_PID"].flatMap({ Int32($0) }), pid == getpid(),
              let count = environment["LISTEN_FDS"].flatMap({ Int($0) }) else { return false }
        return count >= 1
    }

    /// systemd's first socket when `LISTEN_PID` is this process, else a new socket bound at `path`.
    static func open(path: String, environment: [String: String]) throws -> AgentListener {
        if passedBySystemd(environment: environment) {
            for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
            let descriptor: Int32 = 3  // SD_LISTEN_FDS_START
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            try nonBlocking(descriptor)
            return AgentListener(descriptor: descriptor, bound: nil)
        }
        try SafePath.checkDirectories(above: path, owner: geteuid(), what: "the agent's socket")
        var info = stat()
        if lstat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw CommandFailure(.config, "\(path) exists and is not a socket: keymgr will not replace it; choose another --socket")
            }
            let probe = agent_socket_connect(path)
            if probe >= 0 {
                Glibc.close(probe)
                throw CommandFailure(.config, "an agent already serves \(path): stop it first, or choose another --socket")
            }
            unlink(path)  // a socket left by an agent that is gone
        }
        let descriptor = agent_socket_listen(path, 128)
        guard descriptor >= 0 else {
            throw CommandFailure(.config, "cannot listen on \(path): \(String(cString: strerror(errno))): "
                + "check its directory exists and is writable by this user")
        }
        // Anyone on the device may connect: the policy, not the socket's mode, decides what they may do.
        _ = chmod(path, 0o666)
        try nonBlocking(descriptor)
        return AgentListener(descriptor: descriptor, bound: path)
    }

    private static func nonBlocking(_ descriptor: Int32) throws {
        let flags = fcntl(descriptor, F_GETFL)
        guard flags >= 0, fcntl(descriptor, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw CommandFailure(.config, "the listening socket is not usable: \(String(cString: strerror(errno)))")
        }
    }

    /// Stops listening (once): closes the socket, and removes the path bound here, so a client finds no agent
    /// rather than a queue nobody serves. systemd keeps its own socket and queues for the next agent.
    func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
        if let bound { unlink(bound) }
    }
}
