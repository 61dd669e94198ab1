import Foundation
import Storage
import Synchronization
import XCTest
@testable import keymgr

/// How many SQL statements a request runs against the store, counted with `Store.statementObserver` while the
/// command runs in this process as the agent's worker runs it (`KeymgrMain.run`). Each bound is what the request
/// needs today: a read added back to `status`, `sign` or `token refresh` fails here.
final class ReadsPerRequestTests: ServerTestCase {
    /// The store, its server profile, alice's tokens (a bound login) and two keys: alice's (NONE) and carol's
    /// (APPLICATION_PIN).
    override func setUpWithError() throws {
        try super.setUpWithError()
        try startOAuth()
        registerClientAndLogIn()
        try sandbox.bind("alice")
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")
    }

    private func registerClientAndLogIn() {
        XCTAssertNoThrow(try registerClient("alice"))
        XCTAssertEqual((try? login("alice"))?.status, 0, "alice logged in")
    }

    func testStatusReadsOneSnapshot() throws {
        let statements = try statementsOf(["status", "--json"])
        XCTAssertLessThanOrEqual(statements.count, Self.statusBound, statements.joined(separator: "\n"))
    }

    func testSigningWithoutAPINReadsLittle() throws {
        let statements = try statementsOf(["sign", "--user", "alice", "--challenge", "c"])
        XCTAssertLessThanOrEqual(statements.count, Self.signBound, statements.joined(separator: "\n"))
    }

    func testSigningWithAPINReadsLittle() throws {
        let statements = try statementsOf(["sign", "--user", "carol", "--challenge", "c", "--pin-fd", "\(try pinDescriptor())"])
        XCTAssertLessThanOrEqual(statements.count, Self.signWithPINBound, statements.joined(separator: "\n"))
    }

    func testTokenRefreshReadsTheRevisionOnceUnderTheLock() throws {
        let statements = try statementsOf(["token", "refresh", "--user", "alice"])
        XCTAssertLessThanOrEqual(statements.count, Self.tokenRefreshBound, statements.joined(separator: "\n"))
    }

    // MARK: Bounds (statements, PRAGMAs and transaction control included)

    /// Opening (the schema version; the device row and its stamps in one snapshot), then one snapshot of the device,
    /// counts, schema version and last sync. Was 20: the schema version and the stamps read apart. Then one for the
    /// servers' clock skews (issue 35) and four more in the same snapshot for what status shows of the device (issue
    /// 32): keys by state, PIN keys' attempts left, the server profiles and the wrong-PIN throttle.
    static let statusBound = 21
    /// Opening, resolving the user, selecting the key (one snapshot), one write transaction. Was 41.
    static let signBound = 38
    /// As without a PIN, plus the transaction that counts the guess (it reads the device's Argon2 cost too). Was 59.
    static let signWithPINBound = 53
    /// Opening, the profile, the token row once under the lock, the registration, the write. Was 58: the token row
    /// was read before the lock as well.
    static let tokenRefreshBound = 51

    // MARK: Helpers

    /// Runs keymgr with `arguments` in this process and returns the SQL of every statement it ran, in order.
    private func statementsOf(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> [String] {
        let seen = Mutex<[String]>([])
        Store.statementObserver.withLock { $0 = { sql in seen.withLock { $0.append(sql) } } }
        defer { Store.statementObserver.withLock { $0 = nil } }
        let outcome = try sandbox.keymgrInProcess(arguments)
        XCTAssertEqual(outcome.status, 0, outcome.summary, file: file, line: line)
        let statements = seen.withLock { $0 }
        print("keymgr \(arguments.first ?? "") \(arguments.dropFirst().first ?? ""): \(statements.count) statements")
        return statements
    }

    /// A pipe's read end holding carol's PIN on one line, closed when the test ends.
    private func pinDescriptor() throws -> Int32 {
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let pin = Array("482916\n".utf8)
        XCTAssertEqual(write(ends[1], pin, pin.count), pin.count)
        close(ends[1])
        addTeardownBlock { close(ends[0]) }
        return ends[0]
    }
}
