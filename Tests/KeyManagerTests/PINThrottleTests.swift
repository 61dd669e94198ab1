import Foundation
@testable import KeyManager
import Storage
import Synchronization
import XCTest

/// The agent's throttle of wrong PINs per calling uid (issue 32, finding 6), on a clock the test moves: 3 wrong PINs
/// within 10 minutes block the uid's next attempt on another person's key (busy, nothing spent), the wait doubles,
/// a right PIN is not counted, and a person's own key keeps its own rule.
final class PINThrottleTests: KeyManagerTestCase {
    /// The time the store's manager reads, moved by the test.
    final class Clock: Sendable {
        let now = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
    }

    let clock = Clock()
    let kiosk = AgentCaller(uid: 2004, gid: 2004, pid: 1, groups: [], login: "kiosk")

    func advance(_ seconds: TimeInterval) { clock.now.withLock { $0 = $0.addingTimeInterval(seconds) } }

    /// A manager for requests of `caller`, on the test's clock.
    func serving(_ caller: AgentCaller, _ body: () throws -> Void) throws {
        let clock = self.clock
        manager = try KeyManager.open(home: home, context: RequestContext(caller: caller), environment: [:],
                                      now: { clock.now.withLock { $0 } })
        try body()
    }

    func failedAttempts(_ userId: String) throws -> Int {
        try rawConnection().read { db in
            try Int.fetchOne(db, sql: "SELECT p.failed_attempts FROM app_pins p JOIN user_keys k ON k.kid = p.kid WHERE k.user_id = ?",
                             arguments: [userId]) ?? -1
        }
    }

    func message(_ body: () throws -> Void) -> String {
        do {
            try body()
            return "no error"
        } catch {
            return (error as? KeyManagerError)?.message ?? "\(error)"
        }
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        try bind("bob", .applicationPIN, pin: "482916")
        try bind("carol", .applicationPIN, pin: "735184")
        try bind("dave", .applicationPIN, pin: "591736")
    }

    func testThreeWrongPINsBlockTheCallerAndTheWaitDoubles() throws {
        try serving(kiosk) {
            for user in ["bob", "carol", "bob"] { assertCode(.unAuthorize) { _ = try self.sign(user, pin: "111111") } }
            let held = message { _ = try self.sign("carol", pin: "735184") }
            XCTAssertTrue(held.contains("try again after 2027-01-15T08:10:00") && held.contains("in 10 minutes"), held)
            assertCode(.busy) { _ = try self.sign("bob", pin: "222222") }
            XCTAssertEqual(try failedAttempts("bob"), 2, "nothing spent while blocked")
            XCTAssertEqual(try failedAttempts("carol"), 1)

            advance(10 * 60)
            for _ in 0..<3 { assertCode(.unAuthorize) { _ = try self.sign("carol", pin: "333333") } }
            let doubled = message { _ = try self.sign("bob", pin: "482916") }
            XCTAssertTrue(doubled.contains("in 20 minutes"), doubled)
            advance(20 * 60)
            // A right PIN is not counted: two wrong and a right one leave room for one more wrong PIN.
            assertCode(.unAuthorize) { _ = try self.sign("bob", pin: "444444") }
            assertCode(.unAuthorize) { _ = try self.sign("bob", pin: "555555") }
            XCTAssertNoThrow(try self.sign("bob", pin: "482916"))
            XCTAssertTrue(message { _ = try self.sign("bob", pin: "666666") }.contains("waits until"))
            XCTAssertTrue(message { _ = try self.sign("bob", pin: "482916") }.contains("in 40 minutes"))
            // A day without a wrong PIN: the wait starts again at 10 minutes.
            advance(24 * 60 * 60 + 40 * 60)
            for _ in 0..<3 { assertCode(.unAuthorize) { _ = try self.sign("dave", pin: "777777") } }
            XCTAssertTrue(message { _ = try self.sign("bob", pin: "482916") }.contains("in 10 minutes"))
        }
    }

    func testAPersonsOwnKeyKeepsItsOwnRule() throws {
        // bob's own: his identity is linked to his uid (a name equal to his login would not make it his).
        try manager.link(userId: "bob", uid: 2002, login: "bob")
        try serving(AgentCaller(uid: 2002, gid: 2002, pid: 1, groups: [], login: "bob")) {
            for attempt in 1...4 {
                assertCode(.unAuthorize) { _ = try self.sign("bob", pin: "111111") }
                XCTAssertEqual(try failedAttempts("bob"), attempt)
            }
            assertCode(.pinLocked) { _ = try self.sign("bob", pin: "222222") }
        }
        let throttled = try rawConnection().read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM pin_throttle") }
        XCTAssertEqual(throttled, 0, "bob's own attempts are not counted against his account")
    }

    func testRunDirectlyNothingIsThrottled() throws {
        for _ in 0..<4 { assertCode(.unAuthorize) { _ = try self.sign("carol", pin: "111111") } }
        XCTAssertNoThrow(try sign("carol", pin: "735184"))
    }
}
