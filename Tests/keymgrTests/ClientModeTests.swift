import AgentWire
import CAgentSocket
import Foundation
import XCTest

/// A stand-in agent on a Unix socket of the test's own: it reads one request with the protocol's own decoder and
/// lets the test answer it, so the lean client's side of the protocol is checked without the real agent.
final class FakeAgent: @unchecked Sendable {
    /// What one connection brought.
    struct Received {
        let request: AgentRequest
        let descriptors: [Int32]
        let peerPID: Int32
        let peerUID: UInt32
    }

    let path: String
    private let listener: Int32
    private let lock = NSLock()
    private var received: [Received] = []
    private let arrived = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    /// Listens at `path`; `answer` is called on the connection's thread with what arrived and the connection, and
    /// returns the response to send (nil: send nothing and close).
    init(path: String, answer: @escaping @Sendable (Received, Int32) -> AgentResponse?) throws {
        self.path = path
        listener = agent_socket_listen(path, 8)
        guard listener >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let listener = self.listener
        Thread.detachNewThread { [self] in
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer {
                close(connection)
                done.signal()
            }
            guard let (request, fds) = FakeAgent.readRequest(connection) else {
                arrived.signal()
                return
            }
            var uid: UInt32 = 0, gid: UInt32 = 0
            var pid: Int32 = 0
            _ = agent_socket_peer_credentials(connection, &uid, &gid, &pid)
            let what = Received(request: request, descriptors: fds, peerPID: pid, peerUID: uid)
            lock.withLock { received.append(what) }
            arrived.signal()
            let response = answer(what, connection)
            for fd in fds { close(fd) }
            if let response {
                let frame = AgentWire.frame(response.encoded())
                _ = frame.withUnsafeBytes { agent_socket_send(connection, $0.baseAddress, $0.count, nil, 0) }
            }
        }
    }

    deinit { close(listener) }

    /// The first request, waiting for it up to 30 s.
    func request() -> Received? {
        _ = arrived.wait(timeout: .now() + 30)
        arrived.signal()
        return lock.withLock { received.first }
    }

    /// Waits until the connection has been answered and closed.
    func finished() { _ = done.wait(timeout: .now() + 30) }

    private static func readRequest(_ connection: Int32) -> (AgentRequest, [Int32])? {
        var bytes: [UInt8] = []
        var fds: [Int32] = []
        var chunk = [UInt8](repeating: 0, count: 4 + AgentWire.maximumFrameLength)
        while true {
            var got = [Int32](repeating: -1, count: 9)
            var count = 0
            let n = agent_socket_receive(connection, &chunk, chunk.count, &got, 9, &count)
            guard n > 0 else { return nil }
            fds += got[0..<count]
            bytes += chunk[0..<n]
            guard bytes.count >= 4, let length = try? AgentWire.bodyLength(header: bytes.prefix(4)) else { continue }
            if bytes.count >= 4 + length {
                guard let request = try? AgentRequest.decode(bytes[4..<(4 + length)]) else { return nil }
                return (request, fds)
            }
        }
    }
}

/// The lean client `keymgr`: how it chooses between the agent and embedded mode, what it sends the agent, and how
/// it reports the agent's answer, its absence, and an interruption.
final class ClientModeTests: XCTestCase {
    private var sandbox: Sandbox!

    override func setUpWithError() throws { sandbox = try Sandbox() }
    override func tearDown() { sandbox = nil }

    private var socketPath: String { sandbox.root.appendingPathComponent("agent.sock").path }

    /// Runs the client in a new session (no controlling terminal, so no `/dev/tty` to pass), with a shell that
    /// first opens `redirections` (e.g. `5<file`).
    private func client(_ arguments: [String], redirections: String = "", environment: [String: String] = [:]) throws -> Outcome {
        try sandbox.run(URL(fileURLWithPath: "/usr/bin/setsid"),
                        ["-w", "/bin/sh", "-c", "exec \(redirections) \"$0\" \"$@\"", Sandbox.binary.path] + arguments,
                        extraEnvironment: environment)
    }

    func testAnAgentThatIsNotThereIsExit69AndNeverEmbeddedMode() throws {
        try sandbox.initialise()
        // KEYMGR_HOME names a working store: a client asked for the agent still never opens it itself.
        let missing = try client(["--socket", socketPath, "status"], environment: ["KEYMGR_HOME": sandbox.home.path])
        XCTAssertEqual(missing.status, 69, missing.summary)
        XCTAssertEqual(missing.stdout, "")
        XCTAssertTrue(missing.stderr.hasPrefix("keymgr: the keymgr agent at \(socketPath) is not running: start it"), missing.stderr)

        // A socket file nobody listens on (the agent died): ECONNREFUSED, the same answer; JSON with --json.
        let stale = agent_socket_listen(socketPath, 1)
        XCTAssertGreaterThanOrEqual(stale, 0)
        close(stale)
        let refused = try client(["status", "--json"], environment: ["KEYMGR_SOCKET": socketPath])
        try assertJSONError(refused, status: 69, code: "serverUnavailable")
        XCTAssertTrue(refused.stderr.contains("is not running"), refused.stderr)
    }

    func testHomeWithASocketIsAUsageError() throws {
        let both = try client(["--home", sandbox.home.path, "--socket=\(socketPath)", "status"])
        XCTAssertEqual(both.status, 64, both.summary)
        XCTAssertTrue(both.stderr.contains("--home and --socket cannot be used together"), both.stderr)
        let environment = try client(["status", "--json", "--home", sandbox.home.path], environment: ["KEYMGR_SOCKET": socketPath])
        try assertJSONError(environment, status: 64, code: "usage")
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.home.path), "no store was made")
        let empty = try client(["--socket", "", "status"])
        XCTAssertEqual(empty.status, 64, empty.summary)
    }

    func testEmbeddedModeRunsKeymgrCoreWithTheSameArguments() throws {
        // --home: embedded, even with a socket on disk at the default path's place (KEYMGR_SOCKET unset).
        try sandbox.initialise()
        let status = try sandbox.keymgr(["status", "--json"])
        XCTAssertEqual(status.status, 0, status.summary)
        XCTAssertEqual(try status.object()["deviceName"] as? String, "test kiosk")
        // `agent` always goes to keymgr-core, whatever KEYMGR_SOCKET says: its usage error is keymgr-core's.
        let agent = try client(["agent", "--no-such-option"], environment: ["KEYMGR_SOCKET": socketPath])
        XCTAssertEqual(agent.status, 64, agent.summary)
        XCTAssertFalse(agent.stderr.contains("is not running"), agent.stderr)
    }

    func testTheRequestCarriesTheArgumentsAndTheDescriptorsAndTheClientExitsWithTheAgentsStatus() throws {
        let pinFile = sandbox.root.appendingPathComponent("pin")
        try "482916\n".write(to: pinFile, atomically: true, encoding: .utf8)
        let agent = try FakeAgent(path: socketPath) { received, _ in
            // Write through the client's own stdout and stderr, and read its --pin-fd, as a worker does.
            let stdout = received.descriptors[received.request.fds.firstIndex(of: 1)!]
            let stderr = received.descriptors[received.request.fds.firstIndex(of: 2)!]
            let pin = received.descriptors[received.request.fds.firstIndex(of: 5)!]
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(pin, &buffer, buffer.count)
            let text = "stdout from the agent; the PIN file holds \(n) bytes\n"
            _ = write(stdout, text, text.utf8.count)
            _ = write(stderr, "stderr from the agent\n", 22)
            return AgentResponse(status: 42)
        }
        let arguments = ["--socket", socketPath, "sign", "--user", "alice", "--pin-fd", "5", "--claim", "note=é \"x\""]
        let outcome = try client(arguments, redirections: "5<'\(pinFile.path)'", environment: ["COLUMNS": "99"])
        XCTAssertEqual(outcome.status, 42, outcome.summary)
        XCTAssertEqual(outcome.stdout, "stdout from the agent; the PIN file holds 7 bytes\n")
        XCTAssertEqual(outcome.stderr, "stderr from the agent\n")
        let received = try XCTUnwrap(agent.request())
        XCTAssertEqual(received.request, AgentRequest(arguments: arguments, fds: [0, 1, 2, 5], terminal: false, columns: 99))
        XCTAssertEqual(received.descriptors.count, 4)
        XCTAssertEqual(received.peerUID, getuid())
    }

    func testAnErrorResponseIsReportedAsKeymgrReportsItsOwn() throws {
        _ = try FakeAgent(path: socketPath) { _, _ in
            AgentResponse(status: 77, error: .init(code: "denied", message: "no rule lets you \u{1B}[31mrevoke\u{202E}"))
        }
        let plain = try client(["--socket", socketPath, "revoke", "--user", "bob"])
        XCTAssertEqual(plain.status, 77, plain.summary)
        XCTAssertEqual(plain.stderr, "keymgr: no rule lets you [31mrevoke\n", "control and bidi characters are not printed")
        XCTAssertEqual(plain.stdout, "")

        let socket2 = sandbox.root.appendingPathComponent("agent2.sock").path
        _ = try FakeAgent(path: socket2) { _, _ in
            AgentResponse(status: 75, error: .init(code: "busy", message: "the agent is busy: try again"))
        }
        let json = try client(["--socket", socket2, "revoke", "--json", "--user", "bob"])
        try assertJSONError(json, status: 75, code: "busy")
        XCTAssertEqual(json.stdout, #"{"error":{"code":"busy","message":"the agent is busy: try again"}}"# + "\n")
    }

    func testAnAgentThatHangsUpWithoutAnAnswerIsExit69() throws {
        let agent = try FakeAgent(path: socketPath) { _, _ in nil }
        let outcome = try client(["--socket", socketPath, "status"])
        agent.finished()
        XCTAssertEqual(outcome.status, 69, outcome.summary)
        XCTAssertTrue(outcome.stderr.contains("closed the connection without an answer"), outcome.stderr)
    }

    func testAnInterruptedClientRestoresTheTerminalItsAgentLeftWithoutEcho() throws {
        for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, 143), (SIGHUP, 129)] {
            let path = sandbox.root.appendingPathComponent("agent-\(signal).sock").path
            let agent = try FakeAgent(path: path) { received, connection in
                // A worker's no-echo prompt: echo off on the passed terminal, then wait for the PIN that never comes.
                guard received.request.terminal, let terminal = received.descriptors.last else { return nil }
                var settings = termios()
                tcgetattr(terminal, &settings)
                settings.c_lflag &= ~tcflag_t(ECHO)
                tcsetattr(terminal, TCSANOW, &settings)
                var byte: UInt8 = 0
                _ = read(connection, &byte, 1)  // until the client goes
                return nil
            }
            // posix_openpt by hand (Glibc's module hides it): /dev/ptmx, unlock (TIOCSPTLCK), number (TIOCGPTN).
            let master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
            XCTAssertGreaterThanOrEqual(master, 0)
            defer { close(master) }
            var unlock: Int32 = 0
            XCTAssertEqual(ioctl(master, 0x4004_5431, &unlock), 0)
            var number: UInt32 = 0
            XCTAssertEqual(ioctl(master, 0x8004_5430, &number), 0)
            let slavePath = "/dev/pts/\(number)"
            let slave = try XCTUnwrap(FileHandle(forUpdatingAtPath: slavePath))
            var before = termios()
            XCTAssertEqual(tcgetattr(master, &before), 0)
            XCTAssertNotEqual(before.c_lflag & tcflag_t(ECHO), 0)

            // setsid -c: a new session whose controlling terminal is the pseudo-terminal on stdin.
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
            process.arguments = ["-c", "-w", Sandbox.binary.path, "--socket", path, "pin", "change", "--user", "alice"]
            process.environment = sandbox.environment
            process.standardInput = slave
            process.standardOutput = slave
            process.standardError = slave
            try process.run()
            try? slave.close()
            let received = try XCTUnwrap(agent.request(), "the client never reached the agent")
            XCTAssertTrue(received.request.terminal)
            XCTAssertEqual(received.descriptors.count, 4, "0, 1, 2 and the terminal")
            // The agent's prompt turned echo off.
            var during = termios()
            let deadline = Date().addingTimeInterval(30)
            repeat {
                usleep(10_000)
                tcgetattr(master, &during)
            } while during.c_lflag & tcflag_t(ECHO) != 0 && Date() < deadline
            XCTAssertEqual(during.c_lflag & tcflag_t(ECHO), 0)

            XCTAssertEqual(kill(received.peerPID, signal), 0)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, status, "signal \(signal)")
            var after = termios()
            XCTAssertEqual(tcgetattr(master, &after), 0)
            XCTAssertNotEqual(after.c_lflag & tcflag_t(ECHO), 0, "echo is back on after signal \(signal)")
            agent.finished()
        }
    }

    /// The client's sources and the protocol module import Glibc and each other only: what keeps the client lean is
    /// a rule of the source, not of today's linker.
    func testTheClientAndTheWireModuleImportNoFoundation() throws {
        let allowed: Set<String> = ["Glibc", "AgentWire", "CAgentSocket"]
        for directory in ["Sources/keymgr-client", "Sources/AgentWire"] {
            let folder = packageRoot.appendingPathComponent(directory)
            let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".swift") }
            XCTAssertFalse(files.isEmpty, directory)
            for file in files {
                let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
                for line in text.split(separator: "\n") where line.hasPrefix("import ") {
                    let module = String(line.dropFirst("import ".count)).trimmingCharacters(in: .whitespaces)
                    XCTAssertTrue(allowed.contains(module), "\(directory)/\(file) imports \(module)")
                }
            }
        }
    }

    func testTheClientLinksNoFoundationGRDBOrOpenSSL() throws {
        // The release client is a static executable (no dynamic section: it links nothing at run time, and ldd says
        // so with exit 1); the debug client is dynamic, and its libraries are read by ldd.
        let dynamic = try sandbox.run(URL(fileURLWithPath: "/usr/bin/readelf"), ["--dynamic", Sandbox.binary.path])
        XCTAssertEqual(dynamic.status, 0, dynamic.summary)
        if dynamic.stdout.contains("There is no dynamic section") {
            XCTAssertFalse(dynamic.stdout.contains("NEEDED"), dynamic.stdout)
            let ldd = try sandbox.run(URL(fileURLWithPath: "/usr/bin/ldd"), [Sandbox.binary.path])
            XCTAssertTrue(ldd.stdout.contains("not a dynamic executable") || ldd.stderr.contains("not a dynamic executable"),
                          ldd.summary)
            return
        }
        let ldd = try sandbox.run(URL(fileURLWithPath: "/usr/bin/ldd"), [Sandbox.binary.path])
        XCTAssertEqual(ldd.status, 0, ldd.summary)
        for library in ["Foundation", "libcrypto", "libsqlite3", "libssl", "libargon2", "tss2"] {
            XCTAssertFalse(ldd.stdout.contains(library), "the client links \(library): \(ldd.stdout)")
        }
        let symbols = try sandbox.run(URL(fileURLWithPath: "/usr/bin/nm"), ["-D", "--undefined-only", Sandbox.binary.path])
        XCTAssertFalse(symbols.stdout.contains("sqlite3_") || symbols.stdout.contains("EVP_"), symbols.stdout)
    }
}
