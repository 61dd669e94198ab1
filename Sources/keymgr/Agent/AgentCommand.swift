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

    func validate() throws {
        if let idleExit, idleExit < 1 { throw ValidationError("--idle-exit needs a number of seconds (1 or more)") }
        if maxWorkers < 1 { throw ValidationError("--max-workers needs 1 or more") }
        if maxWorkersPerUser < 1 { throw ValidationError("--max-workers-per-user needs 1 or more") }
        if let socket, socket.isEmpty { throw ValidationError("--socket needs a path") }
    }

    func run() throws {
        try checkStore()
        try AgentGate.load(policyFile: policy ?? Self.defaultPolicy)
        let listener = try AgentListener.open(path: socket ?? Self.defaultSocket)
        defer { listener.remove() }
        globals.console.detail("serving \(globals.storeHome.url.path) on \(listener.name)")
        let server = AgentServer(
            listener: listener.descriptor,
            limits: .init(workers: maxWorkers, workersPerUser: maxWorkersPerUser),
            idleExit: idleExit,
            home: globals.home)
        try server.serve()
    }

    /// Opens the store and its master key once, in a child process, so that no SQLite connection, thread or
    /// key schedule of it stays in the agent that forks the workers. Fails with 78 saying what is wrong.
    private func checkStore() throws {
        let home = globals.storeHome
        let child = fork()
        if child == 0 {
            var status: Int32 = 0
            do {
                let manager = try globals.openManager(readOnly: true)
                _ = try manager.status()
            } catch {
                let message = (error as? any KeymgrFailure)?.message ?? String(describing: error)
                StandardStream.error.write("keymgr: the agent cannot serve the store in \(home.url.path): "
                    + "\(PrintableText.stripped(message))\n")
                status = KeyManagerError.Code.config.exitStatus
            }
            _exit(status)
        }
        guard child > 0 else {
            throw KeyManagerError(.failure, "cannot start a process to check the store: \(String(cString: strerror(errno)))")
        }
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0, errno == EINTR {}
        guard status == 0 else { throw ExitCode(KeyManagerError.Code.config.exitStatus) }
    }
}

/// The agent's listening socket: from systemd's socket activation, or bound here.
struct AgentListener {
    let descriptor: Int32
    /// The path bound here (removed at exit), or nil for systemd's socket.
    let bound: String?
    var name: String { bound ?? "the socket systemd passed" }

    /// systemd's first socket when `LISTEN_PID` is this process, else a new socket bound at `path`.
    static func open(path: String) throws -> AgentListener {
        let environment = ProcessEnvironment.variables
        if let pid = environment["LISTEN_PID"].flatMap({ Int32($0) }), pid == getpid(),
           let count = environment["LISTEN_FDS"].flatMap({ Int($0) }), count >= 1 {
            for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
            let descriptor: Int32 = 3  // SD_LISTEN_FDS_START
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            try nonBlocking(descriptor)
            return AgentListener(descriptor: descriptor, bound: nil)
        }
        var info = stat()
        if lstat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw KeyManagerError(.config, "\(path) exists and is not a socket: keymgr will not replace it; choose another --socket")
            }
            let probe = agent_socket_connect(path)
            if probe >= 0 {
                close(probe)
                throw KeyManagerError(.config, "an agent already serves \(path): stop it first, or choose another --socket")
            }
            unlink(path)  // a socket left by an agent that is gone
        }
        let descriptor = agent_socket_listen(path, 128)
        guard descriptor >= 0 else {
            throw KeyManagerError(.config, "cannot listen on \(path): \(String(cString: strerror(errno))): "
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
            throw KeyManagerError(.config, "the listening socket is not usable: \(String(cString: strerror(errno)))")
        }
    }

    /// Removes the socket bound here, if it is still ours.
    func remove() {
        if let bound { unlink(bound) }
    }
}
