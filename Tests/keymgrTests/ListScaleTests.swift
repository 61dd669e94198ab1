import Foundation
import KeyManager
import Storage
import XCTest

/// `keymgr list --json | python3 -c 'import json,sys; json.load(sys.stdin)'` for stores of 0, 1 and 1,000 keys.
final class ListScaleTests: XCTestCase {

    /// Runs the pipeline through a shell, exactly as written, and returns what Python counted.
    private func pythonParses(_ sandbox: Sandbox, file: StaticString = #filePath, line: UInt = #line) throws -> Int {
        let pipeline = """
            "$KEYMGR" --home "$STORE" list --json | python3 -c 'import json,sys; json.load(sys.stdin)' && \
            "$KEYMGR" --home "$STORE" list --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'
            """
        let outcome = try sandbox.run(URL(fileURLWithPath: "/bin/sh"), ["-c", pipeline],
                                      extraEnvironment: ["KEYMGR": Sandbox.binary.path, "STORE": sandbox.home.path])
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        return Int(outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    func testEmptyStoreListsAsAnEmptyArray() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        XCTAssertEqual(try pythonParses(sandbox), 0)
        XCTAssertEqual(try sandbox.succeed(["list", "--json"]).stdout, "[]\n")
    }

    func testOneKeyStore() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
        XCTAssertEqual(try pythonParses(sandbox), 1)
    }

    func testThousandKeyStore() throws {
        let sandbox = try Sandbox()
        // Built in-process through the library (1,000 `keymgr bind` processes would only test process start-up).
        var options = InitOptions()
        options.deviceName = "scale test"
        options.argon2.memoryKiB = 64
        options.argon2.iterations = 1
        options.argon2.parallelism = 1
        let manager = try KeyManager.initialize(home: StoreLocation(url: sandbox.home), options: options)
        for index in 0..<1_000 {
            var request = BindRequest(userId: String(format: "user-%04d", index))
            request.username = "User \(index) \"Ünïcode\" / \\"
            _ = try manager.bind(request, newPIN: { throw KeyManagerError(.abort, "a NONE key needs no PIN") })
        }

        XCTAssertEqual(try pythonParses(sandbox), 1_000)
        let keys = try sandbox.succeed(["list", "--json"]).array()
        XCTAssertEqual(keys.count, 1_000)
        XCTAssertEqual(keys.first?["userId"] as? String, "user-0000")
        XCTAssertEqual(keys.last?["username"] as? String, "User 999 \"Ünïcode\" / \\")
        XCTAssertEqual(try sandbox.succeed(["users", "--json"]).array().count, 1_000)
        XCTAssertEqual(try sandbox.succeed(["list"]).stdout.split(separator: "\n").count, 1_001)
    }
}
