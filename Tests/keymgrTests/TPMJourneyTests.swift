import Foundation
import SWTPMSupport
import XCTest

/// TPM keys against the reference server: the binding and signing JWS a TPM key signs verify there (the journey
/// would fail otherwise), and sync and admin work on a TPM store as on any other.
final class TPMJourneyTests: ServerTestCase {
    private var tpm: SoftwareTPM!

    override func tearDown() {
        super.tearDown()
        tpm = nil
    }

    func testJourneysSyncAndAdminWorkWithTPMKeys() throws {
        tpm = try SoftwareTPM()
        try start(users: ["alice", "bob"], initArguments: ["--key-backend", "tpm", "--tpm-tcti", tpm.tcti])
        XCTAssertEqual(try sandbox.succeed(["status", "--json"]).object()["keyBackend"] as? String, "tpm")
        let kids = try registerSettled(["alice", "bob"])
        let aliceKid = try XCTUnwrap(kids["alice"])

        let signed = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "alice", "--claim", "purpose=door", "--json"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(try signed.object()["kid"] as? String, aliceKid)

        let listed = try sandbox.succeed(["admin", "devices", "--user", "bob", "--json"]).array()
        XCTAssertEqual(listed.map { $0["kid"] as? String }, [kids["bob"]])

        // The server forgets alice's binding: the next sync revokes her TPM key here (rule 2).
        try server.deleteBinding(user: "alice", uuid: aliceKid)
        let report = try sync(["--force"])
        XCTAssertEqual(report["revoked"] as? [String], [aliceKid])
        XCTAssertEqual(try keys()[aliceKid]?["status"] as? String, "revoked")
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "alice"]).status, 66)
    }
}
