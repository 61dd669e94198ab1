import Foundation
import XCTest

/// A `keymgr agent` of a test's own: a sandbox with a store, a policy, a socket in the sandbox, a passwd and group
/// file served to the agent through libnss-wrapper (so the uids the tests act as have login names), and a small
/// protocol client (Python's `socket.send_fds`) that behaves as the CLI's client does: it passes its stdin, stdout
/// and stderr, prints the agent's own error answers, and exits with the status the agent sends.
final class AgentHarness {
    let sandbox: Sandbox
    var socket: URL { sandbox.root.appendingPathComponent("agent.sock") }
    var policy: URL { sandbox.root.appendingPathComponent("policy.toml") }
    var client: URL { sandbox.root.appendingPathComponent("agent_client.py") }
    var passwd: URL { sandbox.root.appendingPathComponent("passwd") }
    var group: URL { sandbox.root.appendingPathComponent("group") }
    var agentLog: URL { sandbox.root.appendingPathComponent("agent.err") }
    private(set) var agent: Process?

    /// The people the tests act as (uid, login): resolvable only through the agent's nss_wrapper files.
    static let people: [(uid: UInt32, login: String)] = [(4242, "alice"), (4343, "mallory")]

    /// The policy the stub gate understands: these logins may do everything.
    static func policy(allowing logins: [String]) -> String {
        "[[rule]]\nwho = [\(logins.map { "\"user:\($0)\"" }.joined(separator: ", "))]\nmay = [\"*\"]\n"
    }

    /// The full program, which the agent is.
    static let coreBinary = Sandbox.coreBinary

    init(policy text: String = AgentHarness.policy(allowing: ["root"]), initialise: Bool = true) throws {
        sandbox = try Sandbox()
        if initialise { try sandbox.initialise() }
        try text.write(to: policy, atomically: true, encoding: .utf8)
        try Self.clientScript.write(to: client, atomically: true, encoding: .utf8)
        var users = "root:x:0:0:root:/root:/bin/sh\n"
        var groups = "root:x:0:\n"
        for person in Self.people {
            users += "\(person.login):x:\(person.uid):\(person.uid):\(person.login):/nonexistent:/bin/sh\n"
            groups += "\(person.login):x:\(person.uid):\n"
        }
        try users.write(to: passwd, atomically: true, encoding: .utf8)
        try groups.write(to: group, atomically: true, encoding: .utf8)
    }

    deinit { stop() }

    /// The environment the agent runs in: the sandbox's, with nss_wrapper's user database.
    var agentEnvironment: [String: String] {
        var environment = sandbox.environment
        environment["LD_PRELOAD"] = "libnss_wrapper.so"
        environment["NSS_WRAPPER_PASSWD"] = passwd.path
        environment["NSS_WRAPPER_GROUP"] = group.path
        return environment
    }

    /// Initialises the store with a biometric verifier that writes the `{osUser}` it is given to the returned file
    /// (after what is there, or in its place), and binds carol with a biometric-only key.
    func initialiseWithAVerifierThatRecordsItsOSUser(appending: Bool) throws -> URL {
        let seen = sandbox.root.appendingPathComponent("verifier-saw")
        let verifier = sandbox.root.appendingPathComponent("verify-finger")
        try "#!/bin/sh\necho \"$1\" \(appending ? ">>" : ">") \(seen.path)\nexit 0\n"
            .write(to: verifier, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: verifier.path)
        try sandbox.initialise(["--biometric-verifier", "\(verifier.path) {osUser}"])
        try sandbox.bind("carol", ["--auth-type", "biometric-only"])
        return seen
    }

    /// Starts `keymgr agent --home H --socket S --policy P` and waits until it accepts connections; as `uid` (with
    /// `setpriv`, which execs it: the same pid) when given.
    @discardableResult
    func start(_ extra: [String] = [], environment: [String: String] = [:], as uid: UInt32? = nil,
               file: StaticString = #filePath, line: UInt = #line) throws -> Process {
        let process = Process()
        let arguments = ["agent", "--home", sandbox.home.path, "--socket", socket.path, "--policy", policy.path] + extra
        if let uid {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", Self.coreBinary.path] + arguments
        } else {
            process.executableURL = Self.coreBinary
            process.arguments = arguments
        }
        process.environment = agentEnvironment.merging(environment) { _, new in new }
        _ = FileManager.default.createFile(atPath: agentLog.path, contents: nil)
        let output = try FileHandle(forWritingTo: agentLog)
        process.standardError = output
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        agent = process
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            if !process.isRunning {
                XCTFail("the agent exited at start (\(process.terminationStatus)): \(log(contents: agentLog))", file: file, line: line)
                return process
            }
            if Self.connects(socket.path) {
                keepers = Set(children.filter { Self.processName($0) == "keymgr-keeper" })
                return process
            }
            usleep(20_000)
        }
        XCTFail("the agent did not listen within 120 s: \(log(contents: agentLog))", file: file, line: line)
        return process
    }

    private func log(contents url: URL) -> String { (try? String(contentsOf: url, encoding: .utf8)) ?? "" }
    var agentOutput: String { log(contents: agentLog) }

    /// Stops the agent (SIGTERM) and waits for it.
    func stop() {
        guard let agent, agent.isRunning else { return }
        agent.terminate()
        let deadline = Date().addingTimeInterval(20)
        while agent.isRunning && Date() < deadline { usleep(10_000) }
        if agent.isRunning { kill(agent.processIdentifier, SIGKILL) }
        agent.waitUntilExit()
    }

    /// Which program talks to the agent: keymgr's own client, or the protocol client below (which sends what the
    /// CLI's client would refuse to, such as `--home`).
    enum Client { case keymgr, protocolScript }

    /// Runs `keymgr <arguments>` through the agent, as root or as `uid`.
    func request(_ arguments: [String], stdin: String = "", as uid: UInt32? = nil, via client: Client = .keymgr,
                 environment: [String: String] = [:]) throws -> Outcome {
        var command: [String]
        switch client {
        case .keymgr: command = [Sandbox.binary.path, "--socket", socket.path]
        case .protocolScript: command = ["/usr/bin/python3", self.client.path, socket.path]
        }
        if let uid { command = ["/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(uid)", "--clear-groups"] + command }
        let outcome = try sandbox.run(URL(fileURLWithPath: command[0]), Array(command.dropFirst()) + arguments, stdin: stdin,
                                      extraEnvironment: environment)
        return Outcome(status: outcome.status, stdout: outcome.stdout, stderr: outcome.stderr, arguments: arguments)
    }

    /// Starts the protocol client without waiting for it (`mode`: see the script), as root or as `uid`.
    func launch(_ arguments: [String], environment: [String: String] = [:], as uid: UInt32? = nil) throws -> Process {
        let process = Process()
        if let uid {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "/usr/bin/python3", client.path] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [client.path] + arguments
        }
        process.environment = sandbox.environment.merging(environment) { _, new in new }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Starts a request whose worker stays until the client goes: `sign` for pinny (bound here, once, with an
    /// application PIN) reading its PIN from a pipe the client never writes. Returns once the request was sent.
    func launchHeldRequest(file: StaticString = #filePath, line: UInt = #line) throws -> Process {
        if !boundPinny {
            try sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
            boundPinny = true
        }
        heldCount += 1
        let mark = sandbox.root.appendingPathComponent("held-\(heldCount)")
        let client = try launch([socket.path, "sign", "--user", "pinny", "--pin-fd", "3"],
                                environment: ["AGENT_HOLD_PIPE": "1", "AGENT_SENT_MARK": mark.path])
        XCTAssertTrue(Self.eventually { FileManager.default.fileExists(atPath: mark.path) || !client.isRunning },
                      "the held request was sent", file: file, line: line)
        return client
    }
    private var boundPinny = false
    private var heldCount = 0

    /// Sends `bytes` as they are on a new connection; returns the answer's JSON body and whether the agent then
    /// closed the connection.
    func raw(_ bytes: [UInt8]) throws -> (answer: [String: Any], closed: Bool) {
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [client.path, "--raw", hex, socket.path])
        let lines = outcome.stdout.split(separator: "\n").map(String.init)
        guard lines.count == 2, let answer = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any] else {
            XCTFail("no answer: \(outcome.summary)")
            return ([:], false)
        }
        return (answer, lines[1] == "closed")
    }

    /// Whether something accepts connections on `path`.
    static func connects(_ path: String) -> Bool {
        let descriptor = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }

    /// The agent's child processes now.
    private var children: [Int32] {
        guard let agent else { return [] }
        let pid = agent.processIdentifier
        let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        return text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// The store's keeper the agent had once it listened, which is no worker.
    private(set) var keepers: Set<Int32> = []

    /// The process's name (`/proc/PID/comm`): the agent names its children `keymgr-keeper`, `keymgr-users` (the
    /// user database's answers), `keymgr-warming` and `keymgr-warm` (a warm worker preparing the store, then
    /// waiting for a connection) and `keymgr-worker`.
    static func processName(_ pid: Int32) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .newlines)
    }

    /// The agent's warm workers waiting for a connection, their store prepared, now.
    var warmWorkers: [Int32] { children.filter { Self.processName($0) == "keymgr-warm" } }

    /// Whether `pid` is a running process (not gone, not a zombie).
    static func isRunning(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        return !stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
    }

    /// The agent's worker processes serving a request now (cold, or warm ones handed a connection).
    var workers: [Int32] {
        children.filter {
            !keepers.contains($0) && !["keymgr-warm", "keymgr-warming", "keymgr-users"].contains(Self.processName($0))
        }
    }

    /// The agent's child processes now.
    var agentChildren: [Int32] { children }

    /// Waits up to `seconds` for `condition`.
    static func eventually(_ seconds: Double = 20, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(20_000)
        }
        return condition()
    }

    /// The protocol client. `client SOCKET ARGS…`: one request passing stdin, stdout and stderr (and with
    /// AGENT_HOLD_PIPE=1 also the read end of a pipe it never writes, as descriptor 3; it then touches
    /// $AGENT_SENT_MARK). `client --raw HEX SOCKET`: sends the bytes, prints the answer's JSON and then `closed` or
    /// `open`. `client --idle SOCKET MARK`: connects, touches MARK, sends nothing and prints whatever answer comes.
    static let clientScript = #"""
        import json, os, socket, struct, sys

        def exact(s, n):
            b = b""
            while len(b) < n:
                try:
                    c = s.recv(n - len(b))
                except ConnectionResetError:
                    return None
                if not c:
                    return None
                b += c
            return b

        def answer(s):
            head = exact(s, 4)
            if head is None:
                return None
            return json.loads(exact(s, struct.unpack(">I", head)[0]))

        if sys.argv[1] == "--raw":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[3])
            s.sendall(bytes.fromhex(sys.argv[2]))
            print(json.dumps(answer(s)))
            s.settimeout(15)
            try:
                print("closed" if s.recv(1) == b"" else "open")
            except ConnectionResetError:  # closed with bytes of the request unread
                print("closed")
            sys.exit(0)
        if sys.argv[1] == "--tty":
            # stdin and the terminal are a new pseudo-terminal; the PIN is typed when the prompt appears.
            import pty
            master, slave = pty.openpty()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[2])
            body = json.dumps({"version": 1, "arguments": sys.argv[4:], "fds": [0, 1, 2], "terminal": True}).encode()
            socket.send_fds(s, [struct.pack(">I", len(body)) + body], [slave, 1, 2, slave])
            seen = b""
            while not seen.endswith(b": "):
                seen += os.read(master, 1)
            os.write(master, sys.argv[3].encode() + b"\n")
            reply = answer(s)
            sys.stderr.write("terminal: %r\n" % seen.decode())
            sys.exit(reply["status"])
        if sys.argv[1] == "--idle":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[2])
            open(sys.argv[3], "w").close()
            print(json.dumps(answer(s)))
            sys.exit(0)

        path, args = sys.argv[1], sys.argv[2:]
        fds = [0, 1, 2]
        if os.environ.get("AGENT_HOLD_PIPE") == "1":
            held, _writer = os.pipe()
            os.dup2(held, 3)
            fds.append(3)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        body = json.dumps({"version": 1, "arguments": args, "fds": fds, "terminal": False}).encode()
        try:
            socket.send_fds(s, [struct.pack(">I", len(body)) + body], fds)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a busy agent answers and closes before reading: its answer is still there to read
        if os.environ.get("AGENT_SENT_MARK"):
            open(os.environ["AGENT_SENT_MARK"], "w").close()
        reply = answer(s)
        if reply is None:
            sys.stderr.write("keymgr: the agent closed the connection without an answer\n")
            sys.exit(69)
        error = reply.get("error")
        if error:
            options = args[:args.index("--")] if "--" in args else args
            if "--json" in options:
                print(json.dumps({"error": error}, sort_keys=True, separators=(",", ":")))
            sys.stderr.write("keymgr: %s\n" % error["message"])
        sys.exit(reply["status"])
        """#
}

/// The agent serves the CLI: the same bytes and exit statuses as keymgr run directly, and what it refuses.
final class AgentServerTests: XCTestCase {
    func testCommandsThroughTheAgentPrintWhatTheyPrintRunDirectly() throws {
        let harness = try AgentHarness()
        let sandbox = harness.sandbox
        try sandbox.bind("alice")
        try sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try harness.start()

        let commands: [[String]] = [
            ["status"], ["status", "--json"], ["list"], ["list", "--json"], ["list", "--user", "alice", "--json"],
            ["users", "--json"], ["list", "--bogus"], ["list", "--bogus", "--json"], ["sign", "--user", "nobody"],
            ["sign", "--user", "nobody", "--json"], ["revoke", "--user", "nobody", "--yes", "--json"], ["--version"],
            ["sign", "--help"], ["audit", "verify"], ["bind", "--user", "alice", "--auth-type", "fingerprint", "--json"],
        ]
        for command in commands {
            let direct = try sandbox.keymgr(command)
            let served = try harness.request(command)
            XCTAssertEqual(served.status, direct.status, "\(command)\n\(served.summary)\n\(direct.summary)")
            XCTAssertEqual(servedAlike(served.stdout), servedAlike(direct.stdout), "stdout of \(command)")
            XCTAssertEqual(served.stderr, direct.stderr, "stderr of \(command)")
        }

        // Commands that write: the result is the same kind of thing, and the store sees it.
        let signed = try harness.request(["sign", "--user", "pinny", "--challenge", "c-1", "--pin-stdin"], stdin: "482916\n")
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(signed.stdout.trimmingCharacters(in: .newlines).split(separator: ".").count, 3, signed.summary)
        let wrong = try harness.request(["sign", "--user", "pinny", "--pin-stdin", "--json"], stdin: "000000\n")
        try assertJSONError(wrong, status: 77, code: "unAuthorize")
        let bound = try harness.request(["bind", "--user", "bob", "--json"])
        XCTAssertEqual(bound.status, 0, bound.summary)
        assertKeyObject(try bound.object(), userId: "bob", username: nil, authType: "NONE", status: "active", extraFields: ["jwk"])
        let listed = try sandbox.keymgr(["list", "--user", "bob", "--json"]).array()
        XCTAssertEqual(listed.first?["kid"] as? String, try bound.object()["kid"] as? String)
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
    }

    func testTheCallerIsTheAuditActorAndTheVerifiersOSUser() throws {
        let harness = try AgentHarness(policy: AgentHarness.policy(allowing: ["root", "alice"]), initialise: false)
        let sandbox = harness.sandbox
        let seen = try harness.initialiseWithAVerifierThatRecordsItsOSUser(appending: false)
        try harness.start()

        let served = try harness.request(["sign", "--user", "carol", "--challenge", "c-2"], as: 4242)
        XCTAssertEqual(served.status, 0, served.summary + harness.agentOutput)
        XCTAssertEqual(try String(contentsOf: seen, encoding: .utf8), "alice\n", "{osUser} is the caller's login")
        var entries = try sandbox.keymgr(["audit", "--json"]).array()
        XCTAssertEqual(entries.last?["event"] as? String, "key.signed")
        XCTAssertEqual(entries.last?["actor"] as? String, "alice (uid 4242)")

        // Run directly, the OS user running keymgr is both, as before.
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "carol"]).status, 0)
        XCTAssertEqual(try String(contentsOf: seen, encoding: .utf8), "root\n")
        entries = try sandbox.keymgr(["audit", "--json"]).array()
        XCTAssertEqual(entries.last?["actor"] as? String, "root")

        // A caller the policy does not name is denied, whatever the client says about itself.
        let denied = try harness.request(["sign", "--user", "carol", "--json"], as: 4343)
        XCTAssertEqual(denied.status, 77, denied.summary)
        XCTAssertTrue(denied.stderr.contains("mallory"), denied.summary)
        // Nothing was signed: the one new entry is the denial, naming the caller the kernel reported.
        let after = try sandbox.keymgr(["audit", "--json"]).array()
        XCTAssertEqual(after.count, entries.count + 1, "nothing but the denial was recorded")
        XCTAssertEqual(after.last?["event"] as? String, "agent.denied")
        XCTAssertEqual(after.last?["actor"] as? String, "mallory (uid 4343)")
    }

    func testFilesNamedByOptionsAreReadOnlyIfTheCallerMayReadThem() throws {
        let harness = try AgentHarness(policy: AgentHarness.policy(allowing: ["root", "alice"]))
        let secret = harness.sandbox.root.appendingPathComponent("root-only.json")
        try "{\"client_name\":\"x\"}".write(to: secret, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: secret.path)
        try harness.start()
        let served = try harness.request(["dcr", "register", "--user", "alice", "--metadata", secret.path, "--json"], as: 4242)
        try assertJSONError(served, status: 65, code: "badInput")
        XCTAssertTrue(served.stderr.contains("you (uid 4242) cannot read \(secret.path): Permission denied"), served.summary)
        // Readable by everyone, but inside a directory alice may not enter: not hers to name either.
        let closed = harness.sandbox.root.appendingPathComponent("closed")
        try FileManager.default.createDirectory(at: closed, withIntermediateDirectories: false)
        let inside = closed.appendingPathComponent("open.json")
        try "{\"client_name\":\"x\"}".write(to: inside, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: inside.path)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: closed.path)
        let hidden = try harness.request(["dcr", "register", "--user", "alice", "--metadata", inside.path, "--json"], as: 4242)
        try assertJSONError(hidden, status: 65, code: "badInput")
        XCTAssertTrue(hidden.stderr.contains("you (uid 4242) cannot read \(inside.path): Permission denied"), hidden.summary)
        // A file alice may read gets past the check (and on to the server, which is not configured: 78).
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: closed.path)
        let readable = try harness.request(["dcr", "register", "--user", "alice", "--metadata", inside.path, "--json"], as: 4242)
        XCTAssertFalse(readable.stderr.contains("cannot read"), readable.summary)
        XCTAssertNotEqual(readable.status, 65, readable.summary)
        // The credential file `server set` names, which sync reads later as the agent, is checked the same way.
        let credential = try harness.request(["server", "set", "--dialect", "pingam", "--base-url", "https://am.example.com/am",
                                              "--credential-file", secret.path, "--json"], as: 4242)
        try assertJSONError(credential, status: 65, code: "badInput")
        // A client that passes no descriptor for the file gets nothing read for it: the agent never opens the name.
        let unpassed = try harness.request(["dcr", "register", "--user", "alice", "--metadata", inside.path, "--json"],
                                           via: .protocolScript)
        try assertJSONError(unpassed, status: 64, code: "usage")
        XCTAssertTrue(unpassed.stderr.contains("did not come with the request"), unpassed.summary)
    }

    func testAPINPromptAppearsOnTheTerminalTheClientPassed() throws {
        let harness = try AgentHarness()
        try harness.sandbox.bind("pinny", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
        try harness.start()
        let outcome = try harness.sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [
            harness.client.path, "--tty", harness.socket.path, "482916", "sign", "--user", "pinny", "--challenge", "c-3",
        ])
        XCTAssertEqual(outcome.status, 0, outcome.summary + harness.agentOutput)
        XCTAssertTrue(outcome.stderr.contains("terminal: 'PIN for"), outcome.summary)
        XCTAssertEqual(outcome.stdout.trimmingCharacters(in: .newlines).split(separator: ".").count, 3, outcome.summary)
        let wrong = try harness.sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), [
            harness.client.path, "--tty", harness.socket.path, "000000", "sign", "--user", "pinny",
        ])
        XCTAssertEqual(wrong.status, 77, wrong.summary)
    }

    func testHomeInitAndAgentAreRefusedThroughTheAgent() throws {
        let harness = try AgentHarness()
        try harness.start()
        for command in [["--home", "/tmp", "status"], ["status", "--home=/tmp"], ["init"], ["--json", "agent"]] {
            let served = try harness.request(command, via: .protocolScript)
            XCTAssertEqual(served.status, 64, served.summary)
            XCTAssertTrue(served.stderr.hasPrefix("keymgr: "), served.summary)
        }
        XCTAssertTrue(try harness.request(["--home", "/tmp", "status"], via: .protocolScript).stderr.contains("serves one store"))
        // `--socket` is the client's: the agent drops it.
        XCTAssertEqual(try harness.request(["--socket", "/elsewhere", "status"], via: .protocolScript).status, 0)
        // keymgr's own client refuses `init` and `--home` with a socket before asking; the agent, if asked, too.
        XCTAssertEqual(try harness.request(["init"]).status, 64)
    }

    func testAStartWithoutAStoreOrOverAFileThatIsNoSocketExits78() throws {
        let bare = try AgentHarness(initialise: false)
        let process = Process()
        process.executableURL = AgentHarness.coreBinary
        process.arguments = ["agent", "--home", bare.sandbox.home.path, "--socket", bare.socket.path, "--policy", bare.policy.path]
        process.environment = bare.agentEnvironment
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 78)
        XCTAssertFalse(FileManager.default.fileExists(atPath: bare.socket.path), "no socket without a store")

        // A master key that does not open the store.
        let wrongKey = try AgentHarness()
        let key = wrongKey.sandbox.home.appendingPathComponent("master.key")
        try Data(repeating: 7, count: try Data(contentsOf: key).count).write(to: key)
        let refused = try wrongKey.sandbox.run(AgentHarness.coreBinary, [
            "agent", "--home", wrongKey.sandbox.home.path, "--socket", wrongKey.socket.path, "--policy", wrongKey.policy.path,
        ])
        XCTAssertEqual(refused.status, 78, refused.summary)
        XCTAssertTrue(refused.stderr.contains("the agent cannot serve the store in"), refused.summary)
        XCTAssertFalse(FileManager.default.fileExists(atPath: wrongKey.socket.path))

        let harness = try AgentHarness()
        try "not a socket".write(to: harness.socket, atomically: true, encoding: .utf8)
        let outcome = try harness.sandbox.run(AgentHarness.coreBinary, [
            "agent", "--home", harness.sandbox.home.path, "--socket", harness.socket.path, "--policy", harness.policy.path,
        ])
        XCTAssertEqual(outcome.status, 78, outcome.summary)
        XCTAssertTrue(outcome.stderr.contains("is not a socket"), outcome.summary)
        XCTAssertEqual(try String(contentsOf: harness.socket, encoding: .utf8), "not a socket")
    }
}
