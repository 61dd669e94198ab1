import Foundation
import SWTPMSupport
import XCTest

/// A TPM cleared or replaced (issue 36): a fresh swtpm at the store's socket stands in for it. `status` and `doctor`
/// say which keys are unusable and why (not `tampered`), `tpm recover` revokes them with a reason, people are told to
/// bind again, and the new TPM is taken into use.
final class TPMRecoveryTests: XCTestCase {
    private var tpm: SoftwareTPM!
    private var replacement: SoftwareTPM?
    private var sandbox: Sandbox!

    override func setUpWithError() throws {
        tpm = try SoftwareTPM()
        sandbox = try Sandbox()
    }

    override func tearDownWithError() throws {
        sandbox = nil
        replacement = nil
        tpm = nil
    }

    func testAReplacedTPMIsNamedNotTamperedAndRecoverRevokesItsKeysSoPeopleBindAgain() throws {
        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", tpm.tcti])
        let alice = try XCTUnwrap(try sandbox.bind("alice")["kid"] as? String)
        let bob = try XCTUnwrap(try sandbox.bind("bob", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482915\n")["kid"] as? String)
        try sandbox.succeed(["sign", "--user", "alice"])
        XCTAssertEqual(try sandbox.keymgr(["tpm", "recover", "--yes"]).status, 64, "the TPM is the store's own: nothing to recover")

        // The TPM is replaced (a fresh one, with nothing of the old one's, at the same socket).
        tpm.stop()
        replacement = try SoftwareTPM(socket: tpm.socket)

        let status = try sandbox.succeed(["status", "--json"]).object()
        let replaced = try XCTUnwrap(status["tpmReplaced"] as? [String: Any], "\(status)")
        XCTAssertTrue((replaced["why"] as? String)?.contains("cleared or replaced") == true, "\(replaced)")
        let unusable = try XCTUnwrap(replaced["unusableKeys"] as? [[String: Any]])
        XCTAssertEqual(Set(unusable.compactMap { $0["kid"] as? String }), [alice, bob])
        let human = try sandbox.succeed(["status"]).stdout
        XCTAssertTrue(human.contains("cleared or replaced") && human.contains("2 keys are unusable")
                      && human.contains("keymgr tpm recover"), human)

        let doctor = try sandbox.keymgr(["doctor"])
        XCTAssertEqual(doctor.status, 1, doctor.summary)
        XCTAssertTrue(doctor.stdout.contains("FAIL  tpm") && doctor.stdout.contains("cleared or replaced")
                      && doctor.stdout.contains(String(alice.prefix(8))) && doctor.stdout.contains("tpm recover"), doctor.stdout)

        // Using a key says the same, and is no tampering: nothing is recorded as such.
        for (user, stdin) in [("alice", ""), ("bob", "482915\n")] {
            let refused = try sandbox.keymgr(["sign", "--user", user] + (stdin.isEmpty ? [] : ["--pin-stdin"]), stdin: stdin)
            XCTAssertEqual(refused.status, 78, "\(user): \(refused.summary)")
            XCTAssertTrue(refused.stderr.contains("cleared or replaced") && refused.stderr.contains("keymgr tpm recover")
                          && !refused.stderr.contains("tamper"), refused.stderr)
        }
        for text in [try sandbox.succeed(["status"]).stdout, try sandbox.keymgr(["doctor"]).stdout] {
            XCTAssertFalse(text.contains("tamper"), text)
        }
        XCTAssertFalse(try sandbox.succeed(["audit", "--json"]).array().contains { $0["event"] as? String == "store.tampered" })

        // The administrator recovers: both keys revoked with the reason, the act audited.
        let recovered = try sandbox.keymgr(["tpm", "recover", "--yes", "--json"])
        XCTAssertEqual(recovered.status, 0, recovered.summary)
        let report = try recovered.object()
        XCTAssertEqual(Set((report["revoked"] as? [[String: Any]] ?? []).compactMap { $0["kid"] as? String }), [alice, bob])
        XCTAssertNotEqual(report["newCounterIndex"] as? String, report["oldCounterIndex"] as? String)
        XCTAssertTrue((report["revoked"] as? [[String: Any]] ?? []).allSatisfy {
            ($0["reason"] as? String)?.contains("cleared or replaced") == true }, "\(report)")
        let listed = try sandbox.succeed(["list", "--status", "all", "--json"]).array()
        for key in listed {
            XCTAssertEqual(key["status"] as? String, "revoked", "\(key)")
        }
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "tpm.recovered", "--json"]).array().count, 1)
        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "key.revoked", "--json"]).array().count, 2)
        try sandbox.succeed(["audit", "verify"])

        // People are told to bind again, and the new TPM takes new keys, signs, and steps its own counter.
        let again = try sandbox.keymgr(["sign", "--user", "alice"])
        XCTAssertEqual(again.status, 66, again.summary)
        XCTAssertTrue(again.stderr.contains("cleared or replaced") && again.stderr.contains("keymgr bind --user alice"),
                      again.stderr)
        try sandbox.bind("alice")
        try sandbox.succeed(["sign", "--user", "alice"])
        try sandbox.bind("bob", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "693027\n")
        try sandbox.succeed(["sign", "--user", "bob", "--pin-stdin"], stdin: "693027\n")
        XCTAssertTrue(try sandbox.succeed(["status", "--json"]).object()["tpmReplaced"] is NSNull)
        let healthy = try sandbox.keymgr(["doctor"])
        XCTAssertTrue(healthy.stdout.contains("ok    tpm"), healthy.stdout)
        XCTAssertEqual(try sandbox.succeed(["tpm", "status", "--json"]).object()["holdsLockoutAuth"] as? Bool, true,
                       "keymgr set the new TPM's lockoutAuth")
        let twice = try sandbox.keymgr(["tpm", "recover", "--yes"])
        XCTAssertEqual(twice.status, 64, twice.summary)
        XCTAssertTrue(twice.stderr.contains("nothing to recover"), twice.stderr)
    }
}

/// Background commands (`sync`, `status`, `doctor`, run by timers and monitoring) never use a DA-protected object, so
/// their retries can never count toward a TPM lockout: the commands they send are logged by a gate in front of the
/// swtpm, and the TPM's DA counter is read before and after.
final class TPMBackgroundCommandTests: ServerTestCase {
    private var tpm: SoftwareTPM!
    private var gate: TPMCommandGate!

    override func tearDown() {
        super.tearDown()
        gate = nil
        tpm = nil
    }

    func testSyncStatusAndDoctorSendNothingDictionaryAttackProtected() throws {
        tpm = try SoftwareTPM()
        gate = try TPMCommandGate(in: tpm)
        try start(users: ["alice", "bob"], initArguments: ["--key-backend", "tpm", "--tpm-tcti", gate.tcti])
        _ = try registerSettled(["alice"])
        try sandbox.bind("bob", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482915\n")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "bob", "--pin-stdin"], stdin: "000000\n").status, 77)
        func failures() throws -> Int {
            try XCTUnwrap(try sandbox.succeed(["tpm", "status", "--json"]).object()["failures"] as? Int)
        }
        let before = try failures()
        XCTAssertEqual(before, 1, "the wrong PIN counted on the TPM (what a lockout is made of)")

        // What uses an object's authorisation (Load of a key, Sign, Unseal, ObjectChangeAuth, PolicySecret) or could
        // reset the lockout.
        let protected: Set<String> = Set([0x157, 0x15D, 0x15E, 0x150, 0x151, 0x139, 0x153, 0x131, 0x120].map {
            String(format: "0x%x", $0)
        })
        for command in [["sync", "--force"], ["status"], ["status", "--json"], ["doctor"], ["doctor", "--json"]] {
            gate.forget()
            let outcome = try sandbox.keymgr(command)
            XCTAssertTrue([0, 1].contains(outcome.status), "\(command): \(outcome.summary)")
            let sent = try gate.commands().map(\.code)
            // The gate sees what they send: a sync writes (so reads the rollback counter), status and doctor ask.
            XCTAssertTrue(command.first == "sync" ? sent.contains("0x14e") : !sent.isEmpty, "\(command): \(sent)")
            XCTAssertTrue(protected.isDisjoint(with: sent), "\(command) sent \(sent)")
        }
        XCTAssertEqual(try failures(), before, "the DA counter is where it was")
    }
}
