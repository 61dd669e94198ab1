import Foundation
import SWTPMSupport
import XCTest

/// W7 through the agent on a TPM store: a flood of denials from one uid leaves the store's growth bounded (one
/// audit entry a minute, with the count) and never steps the TPM's rollback counter.
final class DenialFloodTests: XCTestCase {
    func testADenialFloodCostsOneEntryAMinuteAndNoCounterStep() throws {
        let tpm = try SoftwareTPM()
        let gate = try TPMCommandGate(in: tpm)
        let harness = try AgentHarness(initialise: false)
        let sandbox = harness.sandbox
        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", gate.tcti])
        try sandbox.bind("carol")
        try harness.start()
        let mallory: UInt32 = 4343
        let entriesBefore = try sandbox.succeed(["audit", "--json"]).array().count
        gate.forget()

        let flood = 40
        let started = Date()
        for _ in 0..<flood {
            let denied = try harness.request(["sign", "--user", "carol"], as: mallory)
            XCTAssertEqual(denied.status, 77, denied.summary)
        }
        let minutes = Int(Date().timeIntervalSince(started) / 60)
        let sent = try gate.commands()
        XCTAssertFalse(sent.contains { $0.code.hasSuffix("0x134") }, "a denial steps no NV counter: \(sent)")

        // Reading the log writes the count still waiting; every denial is accounted for, in few entries.
        let denials = try sandbox.succeed(["audit", "--event", "agent.denied", "--json"]).array()
        XCTAssertLessThanOrEqual(denials.count, 2 + minutes, "one entry a minute, and the count read out: \(denials)")
        let counted = denials.map { (($0["details"] as? [String: Any])?["count"] as? Int) ?? 0 }.reduce(0, +)
        XCTAssertEqual(counted, flood, "\(denials)")
        XCTAssertTrue(denials.allSatisfy { $0["actor"] as? String == "mallory (uid 4343)" }, "\(denials)")
        let entriesAfter = try sandbox.succeed(["audit", "--json"]).array().count
        XCTAssertEqual(entriesAfter - entriesBefore, denials.count, "nothing else was written")
        XCTAssertFalse(try gate.commands().contains { $0.code.hasSuffix("0x134") }, "reading the log steps nothing either")
        XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
        // The store is still level with its TPM: a write that does step it succeeds.
        try sandbox.succeed(["sign", "--user", "carol"])
    }
}
