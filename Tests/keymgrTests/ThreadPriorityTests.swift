import Foundation
import XCTest

/// Issue 32, finding 10: under the agent's unit (User=keymgr, no capabilities) the journal had "Failed to set thread
/// priority for worker thread … errno=13" on every request that touched the network. libdispatch gives each pool
/// thread the nice value of its queue's QoS with setpriority(2): the async work of a command ran at the main
/// thread's priority, above default, whose nice is negative, and an unprivileged process may not lower its nice.
/// Run as an unprivileged uid under strace, a command that reaches a server must make no setpriority call that
/// fails.
final class ThreadPriorityTests: XCTestCase {
    func testANetworkCommandAsAnUnprivilegedUserAsksForNoPriorityItCannotHave() throws {
        let sandbox = try Sandbox()
        let uid: UInt32 = 4242
        let home = sandbox.root.appendingPathComponent("unprivileged")
        let token = sandbox.root.appendingPathComponent("admin-token")
        XCTAssertEqual(chmod(sandbox.root.path, 0o755), 0)
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        try "not-a-real-token\n".write(to: token, atomically: true, encoding: .utf8)
        for path in [home.path, token.path] { XCTAssertEqual(chown(path, uid, uid), 0) }
        XCTAssertEqual(chmod(token.path, 0o600), 0)

        func asUser(_ arguments: [String]) throws -> Outcome {
            try sandbox.run(URL(fileURLWithPath: "/usr/bin/setpriv"),
                            ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", Sandbox.binary.path, "--home", home.path]
                                + arguments)
        }
        XCTAssertEqual(try asUser(["init"] + Sandbox.fastInit).status, 0)
        XCTAssertEqual(try asUser(["bind", "--user", "alice"]).status, 0)
        // Port 1 on the loopback: nothing listens, so the request fails at once, after the work went to the pool.
        XCTAssertEqual(try asUser(["server", "set", "--dialect", "pingam", "--base-url", "http://127.0.0.1:1",
                                   "--credential-file", token.path]).status, 0)

        let trace = sandbox.root.appendingPathComponent("setpriority.trace")
        let synced = try sandbox.run(URL(fileURLWithPath: "/usr/bin/strace"),
                                     ["-f", "-qq", "-e", "trace=setpriority", "-o", trace.path, "/usr/bin/setpriv",
                                      "--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", Sandbox.binary.path,
                                      "--home", home.path, "sync", "--json", "--timeout", "2"])
        XCTAssertEqual(synced.status, 69, "the server is unreachable: \(synced.summary)")
        XCTAssertTrue(synced.stderr.contains("Couldn't connect to server"), "the command reached the network: \(synced.summary)")
        let calls = try String(contentsOf: trace, encoding: .utf8).split(separator: "\n")
        XCTAssertFalse(calls.isEmpty, "libdispatch's pool threads set their priority: the trace must see them")
        XCTAssertEqual(calls.filter { $0.contains("= -1") }, [], "a setpriority the process may not make")
    }
}
