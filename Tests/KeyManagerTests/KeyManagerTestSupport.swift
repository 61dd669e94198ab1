import Foundation
import GRDB
@testable import KeyManager
import Storage
import XCTest

/// A fresh store in a temporary home per test, with small Argon2 parameters set through `InitOptions`,
/// the same configuration `keymgr init` gives users.
class KeyManagerTestCase: XCTestCase {
    var scratch: URL!
    var manager: KeyManager!

    static let smallArgon2 = Argon2Parameters(memoryKiB: 64, iterations: 1, parallelism: 1)

    override func setUpWithError() throws {
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-km-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        manager = try KeyManager.initialize(home: home, options: options(), environment: [:])
    }

    override func tearDownWithError() throws {
        manager = nil
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    var home: StoreLocation { StoreLocation(url: scratch.appendingPathComponent("home")) }

    /// Init options for tests: small Argon2, and verifier commands when asked for.
    func options(biometric: [String]? = nil, credential: [String]? = nil) -> InitOptions {
        var options = InitOptions()
        options.argon2 = Self.smallArgon2
        options.biometricVerifier = biometric
        options.credentialVerifier = credential
        return options
    }

    /// Re-creates the store with verifier commands configured.
    func reinitialize(biometric: [String]? = nil, credential: [String]? = nil) throws {
        manager = nil
        try FileManager.default.removeItem(at: home.url)
        manager = try KeyManager.initialize(home: home, options: options(biometric: biometric, credential: credential), environment: [:])
    }

    func reopen() throws -> KeyManager { try KeyManager.openEmbedded(home: home, environment: [:]) }

    func pin(_ text: String) -> SecretProvider { { SecretBytes(utf8: text) } }

    let noPIN: SecretProvider = { throw KeyManagerError(.abort, "no PIN expected in this test") }

    @discardableResult
    func bind(_ userId: String, _ authType: AuthType = .none, pin text: String? = nil, challenge: String? = nil,
              issuer: String? = nil) throws -> BindResult {
        var request = BindRequest(userId: userId)
        request.authType = authType
        request.challenge = challenge
        request.issuer = issuer
        return try manager.bind(request, newPIN: text.map(pin) ?? noPIN)
    }

    func sign(_ userId: String, pin text: String? = nil, claims: [String: JSONValue] = [:]) throws -> SignResult {
        var request = SignRequest(userId: userId, kid: nil)
        request.challenge = "challenge-for-\(userId)"
        request.claims = claims
        return try manager.sign(request, pin: text.map(pin) ?? noPIN)
    }

    func rawConnection() throws -> DatabaseQueue { try DatabaseQueue(path: home.home.databaseURL.path) }

    func assertCode(_ code: KeyManagerError.Code, file: StaticString = #filePath, line: UInt = #line,
                    _ body: () throws -> Void) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, code, "\(error)", file: file, line: line)
            XCTAssertFalse((error as? KeyManagerError)?.message.isEmpty ?? true, file: file, line: line)
        }
    }
}

/// SQL undoing the migrations after `version`, newest first, for tests that make the store an older keymgr left
/// (a migration added later adds its undo here).
func undoingMigrations(after version: Int) -> String {
    let undo: [(version: Int, sql: String)] = [
        (12, """
            DROP TABLE dropped_columns;
            ALTER TABLE device ADD COLUMN integrity_mac BLOB;
            ALTER TABLE user_keys ADD COLUMN integrity_mac BLOB;
            ALTER TABLE app_pins ADD COLUMN integrity_mac BLOB;
            ALTER TABLE servers ADD COLUMN integrity_mac BLOB;
            """),
        (11, """
            DROP TRIGGER audit_events_append_only_delete;
            CREATE TRIGGER audit_events_append_only_delete BEFORE DELETE ON audit_events
            BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END;
            ALTER TABLE device DROP COLUMN audit_base_seq;
            ALTER TABLE device DROP COLUMN audit_base_hash;
            ALTER TABLE device DROP COLUMN audit_base_mac;
            ALTER TABLE device DROP COLUMN audit_base_anchor;
            """),
        (10, "DROP TABLE pin_throttle;"),
        (8, "ALTER TABLE servers DROP COLUMN clock_offset_seconds;\nALTER TABLE device DROP COLUMN tampering;"),
        (7, "DROP TABLE person_links;"),
    ]
    return undo.filter { $0.version > version }.map(\.sql).joined(separator: "\n") + "\n"
}

extension KeyManager {
    /// Opens the store with the EMBEDDED request context: keymgr run directly, no agent caller, no policy, full
    /// rights. For tests of what the store does, not of who may do it; a test of a caller passes its own context.
    static func openEmbedded(home: StoreLocation, readOnly: Bool = false,
                             environment: [String: String] = ProcessInfo.processInfo.environment,
                             now: @escaping @Sendable () -> Date = { Date() }) throws -> KeyManager {
        try open(home: home, readOnly: readOnly, context: .embedded, environment: environment, now: now)
    }
}
