import Foundation
@testable import KeyManager
import SWTPMSupport
import XCTest

/// A TPM's bad days: a TCTI over TCP (W11) and a TPM that accepts the connection but never answers (W10).
final class TPMBadDaysTests: XCTestCase {
    private var tpm: SoftwareTPM!
    private var sandbox: Sandbox!

    override func setUpWithError() throws {
        tpm = try SoftwareTPM()
        sandbox = try Sandbox()
    }

    override func tearDownWithError() throws {
        sandbox = nil
        tpm = nil
    }

    /// A free TCP port on loopback (and the one after it, for swtpm's control channel), as the kernel hands them out.
    private func freePort() throws -> UInt16 {
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/python3"), ["-c", """
            import socket
            for _ in range(50):
                a = socket.socket(); a.bind(("127.0.0.1", 0)); port = a.getsockname()[1]
                b = socket.socket()
                try:
                    b.bind(("127.0.0.1", port + 1)); print(port); break
                except OSError:
                    pass
                finally:
                    a.close(); b.close()
            """])
        return try XCTUnwrap(UInt16(outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), outcome.summary)
    }

    /// A swtpm served over TCP on loopback, as the security test found one (every local user can connect to it).
    private func tcpTPM(port: UInt16) throws -> Process {
        let state = sandbox.root.appendingPathComponent("tcp-tpm")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        let swtpm = Process()
        swtpm.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        swtpm.arguments = ["300", "swtpm", "socket", "--tpm2", "--tpmstate", "dir=\(state.path)",
                           "--server", "type=tcp,port=\(port),bindaddr=127.0.0.1",
                           "--ctrl", "type=tcp,port=\(port + 1),bindaddr=127.0.0.1",
                           "--flags", "not-need-init,startup-clear"]
        swtpm.standardOutput = FileHandle.nullDevice
        swtpm.standardError = FileHandle.nullDevice
        try swtpm.run()
        XCTAssertTrue(AgentHarness.eventually(10) { Self.listens(port) }, "swtpm listens on \(port)")
        return swtpm
    }

    private static func listens(_ port: UInt16) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    func testANetworkTCTIIsRefusedUnlessAllowedAndStatusWarns() throws {
        let port = try freePort()
        let swtpm = try tcpTPM(port: port)
        defer { swtpm.terminate(); swtpm.waitUntilExit() }
        let tcti = "swtpm:host=127.0.0.1,port=\(port)"

        for (extra, what) in [(["--key-backend", "tpm", "--tpm-tcti", tcti], "keys"),
                              (["--key-backend", "auto", "--tpm-tcti", tcti], "keys, auto"),
                              (["--key-backend", "software", "--master-key", "tpm", "--tpm-tcti", tcti], "master key"),
                              (["--key-backend", "tpm", "--tpm-tcti", "mssim:host=127.0.0.1,port=\(port)"], "mssim"),
                              (["--key-backend", "tpm", "--tpm-tcti", "swtpm"], "swtpm's default port")] {
            let refused = try sandbox.keymgr(["init"] + Sandbox.fastInit + extra)
            XCTAssertEqual(refused.status, 64, "\(what): \(refused.summary)")
            XCTAssertTrue(refused.stderr.contains("network TCTI") && refused.stderr.contains("path=")
                          && refused.stderr.contains("--tpm-tcti-allow-network"), refused.stderr)
            XCTAssertEqual(try sandbox.keymgr(["status"]).status, 78, "\(what): no store was made")
        }

        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", tcti, "--tpm-tcti-allow-network"])
        try sandbox.bind("alice")
        for format in [["status"], ["status", "--json"]] {
            let status = try sandbox.succeed(format)
            XCTAssertTrue(status.stderr.contains("warning") && status.stderr.contains(tcti)
                          && status.stderr.contains("path=") && status.stderr.contains("0700"), status.summary)
        }
        let doctor = try sandbox.keymgr(["doctor"])
        XCTAssertEqual(doctor.status, 1, doctor.summary)
        XCTAssertTrue(doctor.stdout.contains("FAIL  tpm") && doctor.stdout.contains("network"), doctor.summary)
        // A Unix socket is no network TCTI: no warning.
        let local = try Sandbox()
        try local.initialise(["--key-backend", "tpm", "--tpm-tcti", tpm.tcti])
        XCTAssertFalse(try local.succeed(["status"]).stderr.contains("warning"))
    }

    /// The gate swallows one command and never answers it. keymgr gives 69 naming the TCTI (KEYMGR_TPM_TIMEOUT
    /// bounds the wait; the sandbox's own 60 s limit would fail the test otherwise), and leaves nothing half-written:
    /// a stalled signature or counter check writes nothing; a stalled step after the commit leaves the store one
    /// step ahead, which the next write accepts and repairs.
    func testAStalledTPMGives69NamingTheTCTIAndLeavesNothingHalfWritten() throws {
        let gate = try TPMCommandGate(in: tpm)
        try sandbox.initialise(["--key-backend", "tpm", "--tpm-tcti", gate.tcti])
        try sandbox.bind("alice")
        let quick = ["KEYMGR_TPM_TIMEOUT": "2"]
        func audit() throws -> Int { try sandbox.succeed(["audit", "--json"]).array().count }

        for (command, written) in [(TPMCommandGate.Command.sign, false), (.nvRead, false), (.nvIncrement, true)] {
            let before = try audit()
            gate.forget()
            try gate.stall(next: command)
            let stalled = try sandbox.keymgr(["sign", "--user", "alice"], extraEnvironment: quick)
            XCTAssertEqual(stalled.status, 69, "\(command): \(stalled.summary)")
            XCTAssertTrue(stalled.stderr.contains(gate.tcti) && stalled.stderr.contains("did not answer"), stalled.stderr)
            XCTAssertTrue(try gate.commands().contains { $0.code == "stalled " + TPMCommandGate.code(command) })
            XCTAssertEqual(try audit(), before + (written ? 1 : 0),
                           "\(command): \(written ? "committed before the step" : "nothing written")")
            XCTAssertEqual(try sandbox.keymgr(["audit", "verify"]).status, 0)
            // The TPM answers again: the next signature works (and repairs a store one step ahead).
            try sandbox.succeed(["sign", "--user", "alice"])
        }
        XCTAssertFalse(gate.armed)
    }
}
