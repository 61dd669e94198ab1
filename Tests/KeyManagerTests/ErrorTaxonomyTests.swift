import Foundation
import GRDB
@testable import KeyManager
import Storage
import XCTest

/// Every error of the taxonomy that the local library can produce is reachable and carries its code.
/// (`serverUnavailable`, `serverRejected` and `safetyValve` come from the server side: see SyncTests.)
final class ErrorTaxonomyTests: KeyManagerTestCase {
    func testUnsupportedWithoutAVerifier() throws {
        assertCode(.unsupported) { try self.bind("a", .biometricOnly) }
        assertCode(.unsupported) { try self.bind("a", .biometricAllowFallback) }
    }

    func testUnsupportedWhenTheVerifierIsUnavailable() throws {
        try reinitialize(biometric: ["/bin/sh", "-c", "exit 3"])
        assertCode(.unsupported) { try self.bind("a", .biometricOnly) }
    }

    func testUnAuthorizeWhenTheVerifierRejects() throws {
        try reinitialize(biometric: ["/bin/false"])
        assertCode(.unAuthorize) { try self.bind("a", .biometricOnly) }
    }

    func testFallbackToTheDeviceCredentialOnlyForAllowFallback() throws {
        try reinitialize(biometric: ["/bin/false"], credential: ["/bin/true"])
        try bind("a", .biometricAllowFallback)
        _ = try sign("a")
        assertCode(.unAuthorize) { try self.bind("b", .biometricOnly) }
    }

    func testVerifierGetsTheUserAndTheOSUser() throws {
        let marker = scratch.appendingPathComponent("seen")
        try reinitialize(biometric: ["/bin/sh", "-c", "printf '%s|%s' \"$0\" \"$1\" > \(marker.path)", "{osUser}", "{userId}"])
        try bind("user one", .biometricOnly)
        XCTAssertEqual(try String(contentsOf: marker, encoding: .utf8), "\(KeyManager.osUserName())|user one")
    }

    func testTimeoutWhenTheVerifierHangs() throws {
        try reinitialize(biometric: ["/bin/sleep", "30"])
        var request = BindRequest(userId: "a")
        request.authType = .biometricOnly
        request.verifierTimeout = 0.5
        let started = Date()
        assertCode(.timeout) { _ = try self.manager.bind(request, newPIN: self.noPIN) }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
    }

    func testClientNotRegisteredForUnknownUserOrKid() throws {
        assertCode(.clientNotRegistered) { _ = try self.sign("nobody") }
        assertCode(.clientNotRegistered) { _ = try self.manager.sign(SignRequest(userId: nil, kid: "no-such-kid"), pin: self.noPIN) }
    }

    func testInvalidCustomClaims() throws {
        try bind("a")
        assertCode(.invalidCustomClaims) { _ = try self.sign("a", claims: ["exp": .int(1)]) }
    }

    func testAbortComesFromThePINSource() throws {
        try bind("a", .applicationPIN, pin: "482916")
        assertCode(.abort) { _ = try self.manager.sign(SignRequest(userId: "a", kid: nil), pin: self.noPIN) }
        XCTAssertEqual(try manager.store.read { try $0.appPINs().first?.failedAttempts }, 0, "no PIN, no attempt spent")
    }

    func testUnAuthorizeAndPinLocked() throws {
        try bind("a", .applicationPIN, pin: "482916")
        assertCode(.unAuthorize) { _ = try self.sign("a", pin: "999000") }
        try manager.store.write(audit: nil, rows: manager.integrity.rowKeys) { writer in
            var key = try XCTUnwrap(try writer.keys(statuses: [.active]).first)
            key.status = .locked
            try writer.update(key)
        }
        assertCode(.pinLocked) { _ = try self.sign("a", pin: "482916") }
    }

    func testBusyWhileAnotherProcessHoldsTheWriteLock() throws {
        try bind("a")
        let blocker = try rawConnection()
        try blocker.writeWithoutTransaction { db in
            try db.execute(sql: "BEGIN EXCLUSIVE")
            defer { try? db.execute(sql: "ROLLBACK") }
            assertCode(.busy) { _ = try self.manager.revoke(userId: "a", kid: nil, reason: nil) }
        }
    }

    func testConfigForAMissingStoreOrAnInsecureHome() throws {
        let elsewhere = StoreLocation(url: scratch.appendingPathComponent("empty"))
        assertCode(.config) { _ = try KeyManager.openEmbedded(home: elsewhere, environment: [:]) }
        chmod(home.url.path, 0o777)
        assertCode(.config) { _ = try self.reopen() }
        chmod(home.url.path, 0o700)
        assertCode(.config) { _ = try KeyManager.initialize(home: self.home, options: self.options(), environment: [:]) }
    }

    func testBadInputAndUsage() throws {
        assertCode(.badInput) { try self.bind("a", .applicationPIN, pin: "123456") }
        assertCode(.badInput) { try self.bind("bad\nid") }
        assertCode(.usage) { try self.bind("") }
        var options = options()
        options.pinRetry = 11
        assertCode(.usage) {
            _ = try KeyManager.initialize(home: StoreLocation(url: self.scratch.appendingPathComponent("h2")), options: options, environment: [:])
        }
    }

    func testTamperedForADamagedRow() throws {
        try bind("a")
        try rawConnection().write { try $0.execute(sql: "UPDATE user_keys SET wrapped_private_key = X'00'") }
        assertCode(.tampered) { _ = try self.sign("a") }
    }

    func testEveryCodeHasAName() {
        XCTAssertEqual(Set(KeyManagerError.Code.allCases.map(\.rawValue)).count, KeyManagerError.Code.allCases.count)
        for code in ["unsupported", "clientNotRegistered", "timeout", "invalidCustomClaims", "abort", "unAuthorize",
                     "pinLocked", "serverUnavailable", "serverRejected", "busy", "config", "badInput", "safetyValve"] {
            XCTAssertNotNil(KeyManagerError.Code(rawValue: code), code)
        }
    }
}
