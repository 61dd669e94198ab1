import Foundation
@testable import KeyManager
import SWTPMSupport
import XCTest

/// `init --master-key tpm` through the library, against a swtpm of each test's own: the master key sealed to the TPM
/// (never on disk in clear), opened by unsealing, rotated crash-safely, and refused by any other TPM.
final class TPMMasterKeyTests: KeyManagerTestCase {
    private var tpm: SoftwareTPM!

    override func setUpWithError() throws {
        tpm = try SoftwareTPM()
        try super.setUpWithError()
        manager = nil
        try FileManager.default.removeItem(at: home.url)
    }

    override func tearDownWithError() throws {
        try super.tearDownWithError()
        tpm = nil
    }

    private var sealedPath: String { home.url.appendingPathComponent("master.tpm").path }
    private var keyFilePath: String { home.url.appendingPathComponent("master.key").path }

    private func initializeSealed(backend: KeyBackendChoice = .software) throws {
        var options = options()
        options.keyBackend = backend
        options.tpmTcti = tpm.tcti
        options.masterKey = .tpm
        manager = try KeyManager.initialize(home: home, options: options, environment: [:])
    }

    /// The master key as the sealed file gives it (unsealed by the TPM).
    private func unsealedKey(_ path: String? = nil) throws -> [UInt8] {
        try MasterKey.load(from: .tpmSealed(path ?? sealedPath)).bytes.bytes
    }

    func testTheMasterKeyIsSealedToTheTPMAndNeverWrittenInClear() throws {
        try initializeSealed()
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyFilePath), "no master.key")
        var info = stat()
        XCTAssertEqual(stat(sealedPath, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        let key = try unsealedKey()
        XCTAssertEqual(key.count, 32)
        // Nothing in the home holds the key's bytes.
        for name in try FileManager.default.contentsOfDirectory(atPath: home.url.path) {
            let contents = try Data(contentsOf: home.url.appendingPathComponent(name))
            XCTAssertNil(contents.range(of: Data(key)), "\(name) holds the master key in clear")
        }
        let status = try manager.status()
        XCTAssertEqual(status.masterKeySource, "tpm")
        XCTAssertEqual(status.masterKeyTCTI, tpm.tcti)
        XCTAssertEqual(status.keyBackend, .software, "a sealed master key works with software keys")

        let bound = try bind("alice", challenge: "c")
        manager = try reopen()
        let signed = try sign("alice")
        XCTAssertEqual(try IndependentVerifier.verify(signed.jws, publicJWK: bound.jwk).claims["sub"]?.stringValue, "alice")
        let verification = try manager.verifyAudit()
        XCTAssertNil(verification.firstBad)
        XCTAssertEqual(verification.rowIssues, [])
    }

    func testRotationReSealsAndEveryCrashStateOpens() throws {
        try initializeSealed(backend: .tpm)
        let bound = try bind("alice")
        let first = try Data(contentsOf: URL(fileURLWithPath: sealedPath))
        let firstKey = try unsealedKey()
        XCTAssertEqual(try manager.rotateMasterKey().secretsRewrapped > 0, true)
        let secondKey = try unsealedKey()
        XCTAssertNotEqual(firstKey, secondKey)
        XCTAssertFalse(FileManager.default.fileExists(atPath: sealedPath + ".next"))
        manager = try reopen()
        XCTAssertNoThrow(try IndependentVerifier.verify(try sign("alice").jws, publicJWK: bound.jwk))

        // Committed, not yet renamed: the old blob in place, the new one beside it as master.tpm.next.
        try FileManager.default.moveItem(atPath: sealedPath, toPath: sealedPath + ".next")
        try first.write(to: URL(fileURLWithPath: sealedPath))
        chmod(sealedPath, 0o600)
        manager = try reopen()
        _ = try sign("alice")
        XCTAssertEqual(try unsealedKey(), secondKey, "open finished the rename")
        XCTAssertFalse(FileManager.default.fileExists(atPath: sealedPath + ".next"))

        // Written, not committed: a stray master.tpm.next (another key) beside the store's own; the next rotation
        // replaces it.
        try first.write(to: URL(fileURLWithPath: sealedPath + ".next"))
        chmod(sealedPath + ".next", 0o600)
        manager = try reopen()
        _ = try sign("alice")
        _ = try manager.rotateMasterKey()
        manager = try reopen()
        _ = try sign("alice")
        let verification = try manager.verifyAudit()
        XCTAssertNil(verification.firstBad)
        XCTAssertEqual(verification.rowIssues, [])
    }

    func testAnotherTPMAMissingBlobAndAnUnreachableTPMAreNamed() throws {
        try initializeSealed()
        try bind("alice")
        manager = nil

        tpm.stop()
        XCTAssertThrowsError(try reopen()) { error in
            let error = error as? KeyManagerError
            XCTAssertEqual(error?.code, .serverUnavailable)
            XCTAssertTrue(error?.message.contains(tpm.tcti) == true, error?.message ?? "")
        }

        // Another TPM where this one was: no keymgr storage key there, then one that keymgr made.
        let other = try SoftwareTPM(socket: tpm.socket)
        for round in 0..<2 {
            XCTAssertThrowsError(try reopen()) { error in
                let error = error as? KeyManagerError
                XCTAssertEqual(error?.code, .config, "round \(round)")
                XCTAssertTrue(error?.message.contains("does not unseal") == true, error?.message ?? "")
            }
            _ = try TPMConnection.with(tcti: tpm.tcti) { try $0.storagePrimary() }
        }
        other.stop()
        try tpm.start()
        manager = try reopen()
        _ = try sign("alice")
        manager = nil

        // The blob deleted.
        try FileManager.default.removeItem(atPath: sealedPath)
        XCTAssertThrowsError(try reopen()) { error in
            let error = error as? KeyManagerError
            XCTAssertEqual(error?.code, .config)
            XCTAssertTrue(error?.message.contains("master.tpm") == true, error?.message ?? "")
        }
    }

    func testAnotherSealedKeyDoesNotOpenTheStore() throws {
        try initializeSealed()
        try bind("alice")
        manager = nil
        // A blob sealing another key, on the same TPM: the device row's check value refuses it.
        let elsewhere = scratch.appendingPathComponent("elsewhere.tpm").path
        _ = try MasterKey.createSealed(at: elsewhere, tcti: tpm.tcti)
        try FileManager.default.removeItem(atPath: sealedPath)
        try FileManager.default.copyItem(atPath: elsewhere, toPath: sealedPath)
        XCTAssertThrowsError(try reopen()) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, .config)
            XCTAssertTrue((error as? KeyManagerError)?.message.contains("does not open this store") == true, "\(error)")
        }
    }

    /// swtpm (no resource manager) keeps the sessions of a process killed between starting a session and using it,
    /// and has room for three: the next unseal finds none free, clears them under the TPM lock and goes on.
    func testSessionsAKilledProcessLeftDoNotShutTheStore() throws {
        try initializeSealed()
        try bind("alice")
        manager = nil
        for _ in 0..<3 {
            let connection = try TPMConnection(tcti: tpm.tcti)
            _ = try connection.saltedSession(try connection.storagePrimary(checkTemplate: false),
                                             attributes: TPMConnection.sessionDecrypt)
        }  // never used, never flushed: as a SIGKILL leaves them
        let full = try TPMConnection(tcti: tpm.tcti)
        XCTAssertThrowsError(try full.saltedSession(try full.storagePrimary(checkTemplate: false), attributes: 0)) { error in
            guard case TPMFailure.other(_, let code, _)? = error as? TPMFailure else { return XCTFail("\(error)") }
            XCTAssertEqual(code & 0xFFFF_FF7F, 0x903, "the TPM's session slots are full")
        }
        manager = try reopen()
        _ = try sign("alice")
    }

    func testASealedKeyConflictsWithAnEnvironmentKey() throws {
        var options = options()
        options.tpmTcti = tpm.tcti
        options.masterKey = .tpm
        let file = scratch.appendingPathComponent("env.key").path
        try Data(repeating: 7, count: 32).write(to: URL(fileURLWithPath: file))
        chmod(file, 0o600)
        XCTAssertThrowsError(try KeyManager.initialize(home: home, options: options,
                                                       environment: ["KEYMGR_MASTER_KEY_FILE": file])) { error in
            XCTAssertEqual((error as? KeyManagerError)?.code, .usage)
        }
    }
}
