import Foundation
import GRDB
@testable import KeyManager
import Storage
import XCTest

final class SealingAndSecretsTests: KeyManagerTestCase {
    func testSealedPrivateKeyCopiedIntoAnotherRowFailsToOpen() throws {
        let alice = try bind("alice")
        let bob = try bind("bob")
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE user_keys SET wrapped_private_key = (SELECT wrapped_private_key FROM user_keys WHERE kid = ?) WHERE kid = ?",
                           arguments: [alice.key.kid, bob.key.kid])
        }
        // The key row's MAC covers the sealed key: reported as tampering, never used.
        assertCode(.tampered) { _ = try self.sign("bob") }
        _ = try sign("alice")
    }

    func testNoPINOrPrivateKeyInTheDatabaseWALOrLogs() throws {
        try reinitialize(biometric: ["/bin/true"], credential: ["/bin/true"])
        let pins = ["482916", "730519"]
        var privateKeys: [[UInt8]] = []
        let none = try bind("u-none")
        let pinned = try bind("u-pin", .applicationPIN, pin: pins[0])
        let biometric = try bind("u-bio", .biometricOnly)
        let fallback = try bind("u-fallback", .biometricAllowFallback)
        _ = try manager.changePIN(userId: "u-pin", kid: nil, oldPIN: pin(pins[0]), newPIN: pin(pins[1]))
        for (key, pinText) in [(none, nil), (pinned, pins[1]), (biometric, nil), (fallback, nil)] {
            let record = try XCTUnwrap(try manager.store.read { try $0.key(kid: key.key.kid) })
            let unlocked = try manager.unlock(record, pin: pinText.map(pin) ?? noPIN, timeout: 5)
            privateKeys.append(try XCTUnwrap(unlocked.privateKey as? P256PrivateKey).rawRepresentation.bytes)
        }
        let audit = try manager.auditEntries().map { "\($0)" }.joined(separator: "\n")

        var haystacks: [(String, [UInt8])] = [("audit log", Array(audit.utf8))]
        for suffix in ["", "-wal"] {
            let path = home.home.databaseURL.path + suffix
            if let data = FileManager.default.contents(atPath: path) { haystacks.append((path, [UInt8](data))) }
        }
        XCTAssertTrue(haystacks.contains { $0.0.hasSuffix("-wal") }, "the WAL is searched while it holds the writes")
        for (name, bytes) in haystacks {
            for pinText in pins {
                XCTAssertFalse(contains(bytes, Array(pinText.utf8)), "PIN found in \(name)")
            }
            for key in privateKeys {
                XCTAssertFalse(contains(bytes, key), "private key found in \(name)")
                XCTAssertFalse(contains(bytes, Array(Base64URL.encode(key).utf8)), "private key (base64url) found in \(name)")
                XCTAssertFalse(contains(bytes, Array(Hex.encode(key).utf8)), "private key (hex) found in \(name)")
            }
        }
    }

    func testSecretBytesNeverPrintThemselves() throws {
        let secret = SecretBytes(utf8: "482916")
        for text in ["\(secret)", String(describing: secret), String(reflecting: secret), "\([secret])"] {
            XCTAssertFalse(text.contains("482916"), text)
        }
        let error = KeyManagerError(.unAuthorize, "wrong PIN")
        XCTAssertFalse("\(error)".contains("482916"))
    }

    private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        let first = needle[0]
        var index = 0
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == first, Array(haystack[index..<(index + needle.count)]) == needle { return true }
            index += 1
        }
        return false
    }
}
