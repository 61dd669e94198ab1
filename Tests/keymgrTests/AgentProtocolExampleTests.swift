import Foundation
import XCTest

/// docs/examples/agent_client.py, the protocol's example client, run against a real agent (`keymgr-core agent`
/// in the foreground on a socket of the test's own): what the documentation shows other programs works.
final class AgentProtocolExampleTests: XCTestCase {
    private var sandbox: Sandbox!
    private var agent: Process?

    override func setUpWithError() throws { sandbox = try Sandbox() }

    override func tearDown() {
        if let agent, agent.isRunning {
            agent.terminate()
            agent.waitUntilExit()
        }
        agent = nil
        sandbox = nil
    }

    private var example: String { packageRoot.appendingPathComponent("docs/examples/agent_client.py").path }
    private var socketPath: String { sandbox.root.appendingPathComponent("agent.sock").path }

    /// Starts the agent on the sandbox's store with a policy that lets this user do everything, and waits until
    /// its socket answers.
    private func startAgent() throws {
        try sandbox.initialise()
        _ = try sandbox.bind("alice")
        let policy = sandbox.root.appendingPathComponent("policy.toml")
        // This user may do everything, for every identity user (`for` defaults to "*").
        let login = String(cString: getpwuid(getuid()).pointee.pw_name)
        try "[[rule]]\nwho = [\"user:\(login)\"]\nmay = [\"*\"]\n".write(to: policy, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(policy.path, 0o600), 0)
        let log = sandbox.root.appendingPathComponent("agent.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = Process()
        process.executableURL = Sandbox.coreBinary
        process.arguments = ["agent", "--home", sandbox.home.path, "--socket", socketPath, "--policy", policy.path]
        process.environment = sandbox.environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: log)
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
        agent = process
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            guard process.isRunning else {
                let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                XCTFail("the agent exited \(process.terminationStatus): \(text)")
                throw XCTSkip("no agent")
            }
            if FileManager.default.fileExists(atPath: socketPath),
               try sandbox.run(Sandbox.binary, ["--socket", socketPath, "status"]).status == 0 {
                return
            }
            usleep(50_000)
        }
        XCTFail("the agent did not answer within 60 s: \((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
    }

    private func python(_ arguments: [String], stdin: String = "") throws -> Outcome {
        try sandbox.run(URL(fileURLWithPath: "/usr/bin/env"), ["python3"] + arguments, stdin: stdin)
    }

    func testTheExampleClientRunsCommandsThroughTheAgent() throws {
        try startAgent()
        // The same answer as the CLI gives, byte for byte.
        let status = try python([example, "--socket", socketPath, "--", "status", "--json"])
        XCTAssertEqual(status.status, 0, status.summary)
        let cli = try sandbox.run(Sandbox.binary, ["--socket", socketPath, "status", "--json"])
        XCTAssertEqual(status.stdout, cli.stdout)
        XCTAssertEqual(try status.object()["deviceName"] as? String, "test kiosk")

        let signed = try python([example, "--socket", socketPath, "--", "sign", "--user", "alice", "--challenge", "c1"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(signed.stdout.split(separator: ".").count, 3, "a compact JWS: \(signed.stdout)")

        // The caller is the kernel's: the audit actor is this test's OS user, not anything the client said.
        let audit = try sandbox.run(Sandbox.binary, ["--socket", socketPath, "audit", "--json", "--event", "key.signed"])
        XCTAssertEqual(audit.status, 0, audit.summary)
        let login = String(cString: getpwuid(getuid()).pointee.pw_name)
        XCTAssertEqual(try audit.array().last?["actor"] as? String, "\(login) (uid \(getuid()))", audit.stdout)
    }

    func testTheAgentsRefusalsReachTheExampleClient() throws {
        try startAgent()
        // The agent serves one store: --home is a usage error, reported as the CLI reports its own.
        let home = try python([example, "--socket", socketPath, "--", "--home", "/tmp", "status", "--json"])
        XCTAssertEqual(home.status, 64, home.summary)
        XCTAssertEqual(try home.object()["error"].flatMap { $0 as? [String: Any] }?["code"] as? String, "usage", home.stdout)
        XCTAssertTrue(home.stderr.hasPrefix("keymgr: "), home.stderr)

        // A version this agent does not speak: an error response, not silence.
        let script = """
            import socket, struct, sys
            sys.path.insert(0, sys.argv[2])
            import agent_client
            body = b'{"version":2,"arguments":["status"],"fds":[0,1,2]}'
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(sys.argv[1])
                socket.send_fds(s, [struct.pack(">I", len(body)) + body], [0, 1, 2])
                status, error = agent_client.read_response(s)
            print(status, error["code"], error["message"])
            """
        let version = try python(["-c", script, socketPath, packageRoot.appendingPathComponent("docs/examples").path])
        XCTAssertEqual(version.status, 0, version.summary)
        XCTAssertTrue(version.stdout.hasPrefix("64 usage "), version.stdout)
        XCTAssertTrue(version.stdout.contains("version"), version.stdout)
    }
}
