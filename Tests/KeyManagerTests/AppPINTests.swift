import Foundation
import GRDB
@testable import KeyManager
import Storage
import XCTest

final class AppPINTests: KeyManagerTestCase {
    func testRightPINSignsAndResetsTheCounter() throws {
        try bind("alice", .applicationPIN, pin: "482916")
        assertCode(.unAuthorize) { _ = try self.sign("alice", pin: "000111") }
        XCTAssertEqual(try failedAttempts("alice"), 1)
        _ = try sign("alice", pin: "482916")
        XCTAssertEqual(try failedAttempts("alice"), 0)
    }

    func testLockoutAfterPinRetryWrongPINs() throws {
        try bind("bob", .applicationPIN, pin: "482916")
        for attempt in 1..<5 {
            XCTAssertThrowsError(try sign("bob", pin: "999000")) { error in
                XCTAssertEqual((error as? KeyManagerError)?.code, .unAuthorize)
                XCTAssertTrue("\(error)".contains("\(5 - attempt) attempt"), "\(error)")
            }
        }
        assertCode(.pinLocked) { _ = try self.sign("bob", pin: "999000") }
        XCTAssertEqual(try manager.keys(userId: "bob", statuses: [.locked]).count, 1)
        // Even the right PIN does not open a locked key; a rebind restores the user.
        assertCode(.pinLocked) { _ = try self.sign("bob", pin: "482916") }
        _ = try manager.rebind(userId: "bob", kid: nil, authType: .applicationPIN, newPIN: pin("730519"))
        _ = try sign("bob", pin: "730519")
    }

    func testCounterReachingTheLimitWithoutALockStillLocks() throws {
        // A process killed after committing the fifth failure (counter and MAC together) but before locking:
        // the next attempt locks.
        let bound = try bind("carl", .applicationPIN, pin: "482916")
        try restampPIN(bound.key.kid) { $0.failedAttempts = 5 }
        assertCode(.pinLocked) { _ = try self.sign("carl", pin: "482916") }
    }

    func testWrongPINCannotUnwrapEvenWithForgedVerifierAndCounter() throws {
        let bound = try bind("dora", .applicationPIN, pin: "482916")
        let kid = bound.key.kid
        // Forge what an attacker holding the master key could write: a verifier for their guess, a zero counter,
        // the record's MAC made anew. The PIN layer of the key still needs the real PIN: reported as tampering.
        let record = try XCTUnwrap(try manager.store.read { try $0.appPIN(kid: kid) })
        let forged = try PINDerivation(pin: SecretBytes(utf8: "135790"), salt: [UInt8](record.salt),
                                       parameters: Argon2Parameters(record), kid: kid)
        let forgedVerifier = try manager.hierarchy.seal(forged.verifier, in: .pinVerifier(kid: kid))
        try restampPIN(kid) { $0.verifier = forgedVerifier; $0.failedAttempts = 0; $0.pinRetry = 10 }
        assertCode(.tampered) { _ = try self.sign("dora", pin: "135790") }
        // Nor does a verifier copied from another user's record: it is bound to its own row and does not open here.
        let eve = try bind("eve", .applicationPIN, pin: "135790")
        let eveVerifier = try XCTUnwrap(try manager.store.read { try $0.appPIN(kid: eve.key.kid) }).verifier
        try restampPIN(kid) { $0.verifier = eveVerifier; $0.failedAttempts = 0 }
        assertCode(.tampered) { _ = try self.sign("dora", pin: "135790") }
        try manager.store.write(audit: nil, rows: manager.integrity.rowKeys) { try $0.save(record) }
        // The store was found tampered: no secret of dora's is released until an administrator clears the finding.
        assertCode(.tampered) { _ = try self.sign("dora", pin: "482916") }
        XCTAssertNotNil(try manager.clearTampering())
        _ = try sign("dora", pin: "482916")
    }

    /// Changes a PIN record as someone holding the master key could, MAC included.
    private func restampPIN(_ kid: String, _ change: (inout AppPINRecord) -> Void) throws {
        try manager.store.write(audit: nil, rows: manager.integrity.rowKeys) { writer in
            var record = try XCTUnwrap(try writer.appPIN(kid: kid))
            change(&record)
            try writer.save(record)
        }
    }

    func testWeakPINsAreRefused() throws {
        for weak in ["12345", "123456", "111111", "000000", "654321", "345678", "987654", "password"] {
            assertCode(.badInput) { try self.bind("frank", .applicationPIN, pin: weak) }
        }
        XCTAssertTrue(try manager.keys(userId: "frank", statuses: Set(KeyStatus.allCases)).isEmpty)
        try bind("frank", .applicationPIN, pin: "48a9!x")
    }

    func testShortPINsAllowedWhenTheStoreSaysSo() throws {
        manager = nil
        try FileManager.default.removeItem(at: home.url)
        var options = options()
        options.pinMinLength = 4
        manager = try KeyManager.initialize(home: home, options: options, environment: [:])
        try bind("gus", .applicationPIN, pin: "4829")
        assertCode(.badInput) { try self.bind("hal", .applicationPIN, pin: "1234") }
    }

    func testPINChangeReWrapsAndRequiresTheOldPIN() throws {
        try bind("ida", .applicationPIN, pin: "482916")
        assertCode(.unAuthorize) {
            _ = try self.manager.changePIN(userId: "ida", kid: nil, oldPIN: self.pin("999000"), newPIN: self.pin("730519"))
        }
        _ = try manager.changePIN(userId: "ida", kid: nil, oldPIN: pin("482916"), newPIN: pin("730519"))
        assertCode(.unAuthorize) { _ = try self.sign("ida", pin: "482916") }
        _ = try sign("ida", pin: "730519")
    }

    func testArgon2ParametersAreUpgradedOnTheNextUnlock() throws {
        try bind("jo", .applicationPIN, pin: "482916")
        try restampDevice { $0.argon2MemoryKib = 128; $0.argon2Iterations = 2 }
        _ = try sign("jo", pin: "482916")
        let record = try XCTUnwrap(try manager.store.read { try $0.appPINs() }.first)
        XCTAssertEqual(record.argon2MemoryKib, 128)
        XCTAssertEqual(record.argon2Iterations, 2)
        _ = try sign("jo", pin: "482916")
        // A lower cost in the store's settings never lowers a record's.
        try restampDevice { $0.argon2MemoryKib = 64; $0.argon2Iterations = 1 }
        _ = try sign("jo", pin: "482916")
        let after = try XCTUnwrap(try manager.store.read { try $0.appPINs() }.first)
        XCTAssertEqual([after.argon2MemoryKib, after.argon2Iterations], [128, 2])
    }

    /// Changes the device settings as an administrator holding the master key could, MAC included.
    private func restampDevice(_ change: (inout DeviceRecord) -> Void) throws {
        try manager.store.write(audit: nil, rows: manager.integrity.rowKeys) { writer in
            var device = try XCTUnwrap(try writer.device())
            change(&device)
            try writer.save(device)
        }
    }

    private func failedAttempts(_ userId: String) throws -> Int? {
        let kid = try manager.keys(userId: userId, statuses: KeyStatus.usable).first?.kid ?? ""
        return try manager.store.read { try $0.appPIN(kid: kid)?.failedAttempts }
    }
}
