import Foundation
import GRDB
@testable import KeyManager
import Storage
import SWTPMSupport
import XCTest

/// Keys inside a TPM 2.0 (a swtpm of each test's own): every operation through the library, and what the TPM changes
/// for someone who holds the database and the master key.
final class TPMBackendTests: KeyManagerTestCase {
    private var tpm: SoftwareTPM!

    override func setUpWithError() throws {
        tpm = try SoftwareTPM()
        try super.setUpWithError()
    }

    override func tearDownWithError() throws {
        try super.tearDownWithError()
        tpm = nil
    }

    /// The store's options: the swtpm's TCTI, a TPM that locks PIN keys out after `maxTries` wrong PINs.
    private func tpmOptions(maxTries: UInt32 = 32, pinRetry: Int = 5) -> InitOptions {
        var options = options()
        options.keyBackend = .tpm
        options.tpmTcti = tpm.tcti
        options.tpmMaxTries = maxTries
        options.pinRetry = pinRetry
        return options
    }

    private func reinitializeOnTPM(maxTries: UInt32 = 32, pinRetry: Int = 5) throws {
        manager = nil
        try FileManager.default.removeItem(at: home.url)
        manager = try KeyManager.initialize(home: home, options: tpmOptions(maxTries: maxTries, pinRetry: pinRetry),
                                            environment: [:])
    }

    private func keyRow(_ kid: String) throws -> UserKeyRecord {
        try XCTUnwrap(try rawConnection().read { try UserKeyRecord.fetchOne($0, key: ["kid": kid]) })
    }

    func testEveryOperationWorksWithTPMKeysAndTheJWSVerifiesIndependently() throws {
        try reinitializeOnTPM()
        let status = try manager.status()
        XCTAssertEqual(status.keyBackend, .tpm)
        XCTAssertEqual(status.tpmTcti, tpm.tcti)

        let bound = try bind("alice", challenge: "bind-challenge")
        let verified = try IndependentVerifier.verify(try XCTUnwrap(bound.jws), publicJWK: bound.jwk)
        XCTAssertEqual(verified.claims["challenge"]?.stringValue, "bind-challenge")
        let row = try keyRow(bound.key.kid)
        XCTAssertEqual(row.keyBackend, "tpm")
        // The store holds the TPM-wrapped blob (sealed), far longer than a sealed 32-byte scalar.
        XCTAssertGreaterThan(try XCTUnwrap(row.wrappedPrivateKey).count, 200)
        let signed = try sign("alice", claims: ["purpose": "door"])
        XCTAssertEqual(try IndependentVerifier.verify(signed.jws, publicJWK: bound.jwk).claims["purpose"]?.stringValue, "door")

        // A PIN key: sign, wrong PIN, PIN change, master rotation, rebind, revoke.
        let pinned = try bind("bob", .applicationPIN, pin: "482915")
        _ = try IndependentVerifier.verify(try sign("bob", pin: "482915").jws, publicJWK: pinned.jwk)
        assertCode(.unAuthorize) { _ = try self.sign("bob", pin: "111111") }
        XCTAssertEqual(try manager.tpmStatus()?.failures, 1, "the TPM counted the wrong PIN")
        _ = try manager.changePIN(userId: "bob", kid: nil, oldPIN: pin("482915"), newPIN: pin("693027"))
        assertCode(.unAuthorize) { _ = try self.sign("bob", pin: "482915") }
        _ = try IndependentVerifier.verify(try sign("bob", pin: "693027").jws, publicJWK: pinned.jwk)
        _ = try manager.rotateMasterKey()
        _ = try IndependentVerifier.verify(try sign("bob", pin: "693027").jws, publicJWK: pinned.jwk)
        _ = try IndependentVerifier.verify(try sign("alice").jws, publicJWK: bound.jwk)
        XCTAssertTrue(try XCTUnwrap(manager.tpmStatus()).holdsLockoutAuth, "the sealed lockoutAuth survived the rotation")
        let rebound = try manager.rebind(userId: "bob", kid: nil, authType: .none, newPIN: noPIN)
        XCTAssertEqual(try keyRow(rebound.key.kid).keyBackend, "tpm")
        _ = try IndependentVerifier.verify(try sign("bob").jws, publicJWK: rebound.jwk)
        _ = try manager.revoke(userId: "alice", kid: nil, reason: "test")
        assertCode(.clientNotRegistered) { _ = try self.sign("alice") }
    }

    /// Before: whoever holds the database and the master key opens the PIN verifier and guesses offline at Argon2
    /// speed. After: a TPM key's PIN record holds nothing a PIN can be checked against; only the TPM can tell.
    func testTheStoreHoldsNothingToGuessAPINAgainstOffline() throws {
        let software = try bind("carol", .applicationPIN, pin: "482915")
        XCTAssertTrue(try verifierMatches(kid: software.key.kid, pin: "482915"), "a software key's verifier checks a PIN offline")

        try reinitializeOnTPM()
        let inTPM = try bind("carol", .applicationPIN, pin: "482915")
        XCTAssertFalse(try verifierMatches(kid: inTPM.key.kid, pin: "482915"), "a TPM key's store holds no PIN check")
        XCTAssertEqual(try sign("carol", pin: "482915").kid, inTPM.key.kid)
    }

    /// What an attacker with the database and the master key computes for a guess: the verifier, compared.
    private func verifierMatches(kid: String, pin text: String) throws -> Bool {
        let record = try XCTUnwrap(try rawConnection().read { try AppPINRecord.fetchOne($0, key: ["kid": kid]) })
        let stored = try manager.hierarchy.open(record.verifier, in: .pinVerifier(kid: kid))
        let guess = try PINDerivation(pin: SecretBytes(utf8: text), salt: [UInt8](record.salt),
                                      parameters: Argon2Parameters(record), kid: kid)
        return guess.verifier == stored
    }

    /// Before: restoring the PIN row every few guesses never locks the key. After: the TPM counts every wrong PIN
    /// and locks PIN keys out at maxTries, whatever the store says; `resetTPMLockout` (the lockoutAuth) recovers.
    func testRestoringThePINRowIsStoppedByTheTPMsLockoutAndResetRecovers() throws {
        try reinitializeOnTPM(maxTries: 3, pinRetry: 10)
        let key = try bind("dave", .applicationPIN, pin: "482915")
        try bind("erin")
        let saved = try XCTUnwrap(try rawConnection().read { try Row.fetchOne($0, sql: "SELECT * FROM app_pins WHERE kid = ?", arguments: [key.key.kid]) })
        for _ in 0..<2 {
            assertCode(.unAuthorize) { _ = try self.sign("dave", pin: "000000") }
            // The attacker puts the whole PIN row back (its MACs are the old, valid ones): keymgr's counter starts again.
            try rawConnection().write { db in
                let columns = Array(saved.columnNames)
                try db.execute(sql: "INSERT OR REPLACE INTO app_pins (\(columns.joined(separator: ", "))) VALUES ("
                                   + columns.map { _ in "?" }.joined(separator: ", ") + ")",
                               arguments: StatementArguments(columns.map { saved[$0] as DatabaseValue }))
            }
        }
        assertCode(.unAuthorize) { _ = try self.sign("dave", pin: "000001") }
        let locked = try XCTUnwrap(manager.tpmStatus())
        XCTAssertTrue(locked.inLockout)
        XCTAssertEqual(locked.failures, 3)
        // Now even the right PIN is refused by the TPM, and the message says when the lockout lifts.
        do {
            _ = try sign("dave", pin: "482915")
            XCTFail("the TPM let a PIN key sign during a lockout")
        } catch let error as KeyManagerError {
            XCTAssertEqual(error.code, .pinLocked, error.message)
            XCTAssertTrue(error.message.contains("lockout") && error.message.contains("lifts within"), error.message)
        }
        XCTAssertEqual(try sign("erin").kid.isEmpty, false, "a key without a PIN (noDA) keeps working during a lockout")

        let cleared = try manager.resetTPMLockout()
        XCTAssertFalse(cleared.inLockout)
        XCTAssertEqual(cleared.failures, 0)
        _ = try IndependentVerifier.verify(try sign("dave", pin: "482915").jws, publicJWK: key.jwk)
    }

    func testKeysSurviveATPMRestartAndAnUnreachableTPMNamesItsTCTI() throws {
        try reinitializeOnTPM()
        let bound = try bind("frank")
        tpm.stop()
        do {
            _ = try sign("frank")
            XCTFail("signed with no TPM")
        } catch let error as KeyManagerError {
            XCTAssertEqual(error.code, .serverUnavailable)
            XCTAssertTrue(error.message.contains(tpm.tcti), error.message)
        }
        try tpm.start()
        manager = try reopen()
        _ = try IndependentVerifier.verify(try sign("frank").jws, publicJWK: bound.jwk)
    }

    /// Another TPM has none of the store's: not its keys, not its rollback counter. That is told as a TPM cleared or
    /// replaced (`keymgr tpm recover`), not as tampering: no blob was altered.
    func testAKeyTakenToAnotherTPMDoesNotLoad() throws {
        try reinitializeOnTPM()
        try bind("gina")
        tpm.stop()
        // Another TPM answers at the same TCTI: the store (database and master key) copied to another machine.
        let other = try SoftwareTPM(socket: tpm.socket)
        do {
            _ = try sign("gina")
            XCTFail("a key blob loaded on another TPM")
        } catch let error as KeyManagerError {
            XCTAssertEqual(error.code, .config, error.message)
            XCTAssertTrue(error.message.contains("cleared or replaced") && error.message.contains("tpm recover"), error.message)
        }
        XCTAssertEqual(try manager.tpmReplacement()?.unusableKeys.map(\.userId), ["gina"])
        other.stop()
    }

    func testAutoTakesTheTPMWhenOneAnswersAndSoftwareOtherwiseSayingWhy() throws {
        manager = nil
        try FileManager.default.removeItem(at: home.url)
        var options = options()
        options.tpmTcti = tpm.tcti
        manager = try KeyManager.initialize(home: home, options: options, environment: [:])
        XCTAssertEqual(try manager.status().keyBackend, .tpm)
        XCTAssertEqual(try keyRow(try bind("hank").key.kid).keyBackend, "tpm")

        manager = nil
        try FileManager.default.removeItem(at: home.url)
        options.tpmTcti = "swtpm:path=\(scratch.appendingPathComponent("nothing.sock").path)"
        manager = try KeyManager.initialize(home: home, options: options, environment: [:])
        let status = try manager.status()
        XCTAssertEqual(status.keyBackend, .software)
        XCTAssertTrue(status.keyBackendReason?.contains("no TPM answered at \(options.tpmTcti)") == true,
                      status.keyBackendReason ?? "no reason")
        XCTAssertNil(status.tpmTcti)
        XCTAssertEqual(try keyRow(try bind("hank").key.kid).keyBackend, "software")

        // Asked for explicitly, a TPM that does not answer is an error naming the TCTI, not a quiet fall back.
        manager = nil
        try FileManager.default.removeItem(at: home.url)
        options.keyBackend = .tpm
        assertCode(.serverUnavailable) { _ = try KeyManager.initialize(home: self.home, options: options, environment: [:]) }
    }

    func testTheBackendColumnsAreUnderTheMACs() throws {
        try reinitializeOnTPM()
        let bound = try bind("ivan")
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE user_keys SET key_backend = 'software' WHERE kid = ?", arguments: [bound.key.kid])
        }
        assertCode(.tampered) { _ = try self.sign("ivan") }
        try rawConnection().write { db in
            try db.execute(sql: "UPDATE user_keys SET key_backend = 'tpm' WHERE kid = ?", arguments: [bound.key.kid])
            try db.execute(sql: "UPDATE device SET tpm_tcti = 'swtpm:host=127.0.0.1,port=2321'")
        }
        assertCode(.tampered) { _ = try self.manager.status() }
    }

    /// The counter stepped with no write behind it: what a store one step behind its TPM is (a copy from before
    /// the latest write), since no crash leaves the store behind.
    private func advanceCounterWithoutCommit() throws {
        let device = try manager.device()
        let auth = try manager.tpmSecrets(device, manager.hierarchy).counter
        let index = try XCTUnwrap(device.tpmCounterIndex.flatMap { UInt32(exactly: $0) })
        _ = try TPMConnection.with(tcti: tpm.tcti) { try $0.incrementCounter(index, auth: auth) }
    }

    /// A write's transaction, committed with its counter step recorded, its increment not yet sent: the returned
    /// step is what the writing process still holds. `release()` it for a process that died there; `advance()` it
    /// for one that goes on.
    private func commitWithoutIncrement() throws -> RollbackStep {
        let keys = manager.masterKeys
        return try XCTUnwrap(try manager.store.write(audit: keys.integrity.auditKeys, rows: keys.integrity.rowKeys) { writer in
            try manager.stepRollback(writer, keys)
        })
    }

    /// The rollback counter as the device row records it and as the TPM holds it.
    private func rollbackState() throws -> (store: UInt64, tpm: UInt64) {
        let device = try manager.device()
        let auth = try manager.tpmSecrets(device, manager.hierarchy).counter
        let index = try XCTUnwrap(device.tpmCounterIndex.flatMap { UInt32(exactly: $0) })
        let value = try TPMConnection.with(tcti: tpm.tcti) { try $0.readCounter(index, auth: auth) }
        return (UInt64(try XCTUnwrap(device.rollbackCounter)), value)
    }

    private var copy: URL { scratch.appendingPathComponent("copy") }

    /// The attacker's copy of the whole home, taken now.
    private func snapshot() throws {
        manager = nil
        try? FileManager.default.removeItem(at: copy)
        try FileManager.default.copyItem(at: home.url, to: copy)
        manager = try reopen()
    }

    /// The attacker's copy put back in place of the home.
    private func restore() throws {
        manager = nil
        try FileManager.default.removeItem(at: home.url)
        try FileManager.default.copyItem(at: copy, to: home.url)
        manager = try reopen()
    }

    /// Each write steps the counter once: its transaction records T + 1, and the increment follows the commit.
    func testEachWriteStepsTheCounterOnceAndLeavesItLevelWithTheStore() throws {
        try reinitializeOnTPM()
        let start = try rollbackState()
        XCTAssertEqual(start.store, start.tpm)
        try bind("jane")
        _ = try sign("jane")
        _ = try sign("jane")
        let end = try rollbackState()
        XCTAssertEqual(end.store, end.tpm)
        XCTAssertEqual(end.tpm, start.tpm + 3, "bind, sign, sign: one step each")
        XCTAssertEqual((try FileManager.default.attributesOfItem(atPath: home.url.appendingPathComponent("rollback.lock").path)[.posixPermissions]
                        as? NSNumber)?.intValue, 0o600)
    }

    /// Before: a restored copy of the home (a revoked key's old row with it) signs again. After: the TPM's rollback
    /// counter is ahead of the copy, and keymgr refuses it (`rolledBack`). A store one step AHEAD (a crash between a
    /// commit and its increment) is accepted, and the next write brings store and counter level again; one step
    /// behind is no crash's doing (the increment follows the commit), so it is refused.
    func testAStoreBehindItsCounterIsRefusedAndOneStepAheadIsAcceptedAndRepaired() throws {
        try reinitializeOnTPM()
        try bind("jane")
        try commitWithoutIncrement().release()
        var state = try rollbackState()
        XCTAssertEqual(state.store, state.tpm + 1, "the crash left the store one step ahead")
        _ = try sign("jane")
        state = try rollbackState()
        XCTAssertEqual(state.store, state.tpm, "the next write repaired the counter and stepped it")

        try advanceCounterWithoutCommit()
        assertCode(.rolledBack) { _ = try self.sign("jane") }
        assertCode(.rolledBack) { _ = try self.bind("jane") }
        XCTAssertEqual(try rollbackState().tpm, state.tpm + 1, "a refused write steps nothing")

        try reinitializeOnTPM()
        try bind("jane")
        try snapshot()
        _ = try manager.revoke(userId: "jane", kid: nil, reason: "lost laptop")
        try restore()
        XCTAssertEqual(try manager.keys(userId: "jane", statuses: [.active]).count, 1, "the copy still holds the key as active")
        do {
            _ = try sign("jane")
            XCTFail("a restored copy signed with a revoked key")
        } catch let error as KeyManagerError {
            XCTAssertEqual(error.code, .rolledBack, error.message)
        }
    }

    /// The attacker copies the home between a write's commit and its increment (the store one step ahead) and
    /// puts it back after a later write: refused. (Put back before any later write, the copy is the store as it
    /// is: nothing to roll back.)
    func testACopyTakenBetweenACommitAndItsIncrementIsRefusedAfterALaterWrite() throws {
        try reinitializeOnTPM()
        try bind("jane")
        let step = try commitWithoutIncrement()
        try snapshot()
        try step.advance()
        _ = try manager.revoke(userId: "jane", kid: nil, reason: "lost laptop")
        try restore()
        assertCode(.rolledBack) { _ = try self.sign("jane") }
    }

    /// The attacker copies a store a crash left one step ahead, and puts it back after the next write: refused.
    /// That write repaired the counter before its own step, so no two commits record the same value; recording
    /// T + 1 again would have left this copy level with the TPM, and accepted.
    func testACopyOfAStoreACrashLeftOneAheadIsRefusedAfterTheNextWrite() throws {
        try reinitializeOnTPM()
        try bind("jane")
        try commitWithoutIncrement().release()
        try snapshot()
        _ = try manager.revoke(userId: "jane", kid: nil, reason: "lost laptop")
        let state = try rollbackState()
        XCTAssertEqual(state.store, state.tpm)
        try restore()
        assertCode(.rolledBack) { _ = try self.sign("jane") }
    }

    /// The window one step per write leaves, as docs/security.md states it: a write whose process dies between its
    /// commit and its increment is undone by a copy from just before it (nothing on the TPM says it happened), and
    /// only until the next write commits and steps the counter.
    func testAWriteThatDiedBeforeItsIncrementIsTheOnlyOneACopyCanUndo() throws {
        try reinitializeOnTPM()
        try bind("jane")
        try snapshot()
        try commitWithoutIncrement().release()
        try restore()
        _ = try sign("jane")
        try restore()
        assertCode(.rolledBack) { _ = try self.sign("jane") }
    }

    /// The rollback lock is held from before the counter is read until the increment: a write that finds it held
    /// for 5 s fails `busy` (try again), having written nothing and stepped nothing.
    func testAWriteThatCannotTakeTheRollbackLockIsBusyAndChangesNothing() throws {
        try reinitializeOnTPM()
        try bind("jane")
        let before = try rollbackState()
        let held = try FileLock(path: home.url.appendingPathComponent("rollback.lock").path) { _ in CocoaError(.fileNoSuchFile) }
        XCTAssertTrue(try held.tryLock { _ in CocoaError(.fileLocking) })
        assertCode(.busy) { _ = try self.sign("jane") }
        held.release()
        XCTAssertEqual(try rollbackState().store, before.store)
        XCTAssertEqual(try rollbackState().tpm, before.tpm)
        XCTAssertEqual(try manager.auditEntries().filter { $0.event == "key.signed" }.count, 0)
        _ = try sign("jane")
    }

    /// `master rotate` on a TPM store steps the counter once, its value re-MAC'd under the new key.
    func testMasterRotateStepsTheCounterOnce() throws {
        try reinitializeOnTPM()
        try bind("jane")
        let before = try rollbackState()
        _ = try manager.rotateMasterKey()
        let after = try rollbackState()
        XCTAssertEqual(after.store, after.tpm)
        XCTAssertEqual(after.tpm, before.tpm + 1)
        _ = try sign("jane")
        XCTAssertEqual(try rollbackState().tpm, before.tpm + 2)
    }
}
