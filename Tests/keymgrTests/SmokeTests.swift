import Foundation
import XCTest

/// The fast tier's runs of the real binaries (`make check`, docs/testing.md): a handful of commands a person types, as
/// processes, so an edit that breaks the programs themselves (the client's exec of keymgr-core, argument parsing, exit
/// codes, the agent's socket, a journey, a device login) shows within minutes. Every assertion here is also made, in
/// more depth, by the classes of the whole suite; these only keep the fast tier honest about the binaries.
final class SmokeTests: ServerTestCase {
    /// init, bind, sign, status, users and list on an embedded store.
    func testInitBindSignStatusAndListOnTheEmbeddedStore() throws {
        sandbox = try Sandbox()
        try sandbox.initialise()
        let alice = try sandbox.bind("alice")
        let kid = try XCTUnwrap(alice["kid"] as? String)
        assertKeyObject(alice, userId: "alice", username: nil, authType: "NONE", status: "active", extraFields: ["jwk"])

        let signed = try sandbox.succeed(["sign", "--user", "alice", "--challenge", "smoke"])
        let (header, payload) = try jwsParts(signed.stdout)
        XCTAssertEqual(header["kid"] as? String, kid)
        XCTAssertEqual(payload["challenge"] as? String, "smoke")

        let status = try sandbox.succeed(["status", "--json"]).object()
        XCTAssertEqual(status["deviceName"] as? String, "test kiosk")
        XCTAssertEqual(status["users"] as? Int, 1, "\(status)")

        let users = try sandbox.succeed(["users"])
        XCTAssertTrue(users.stdout.contains("alice"), users.stdout)
        let listed = try sandbox.succeed(["list", "--json"]).array()
        XCTAssertEqual(listed.map { $0["kid"] as? String }, [kid])

        // A usage error and a missing user keep their exit codes through the client.
        XCTAssertEqual(try sandbox.keymgr(["sign"]).status, 64)
        XCTAssertEqual(try sandbox.keymgr(["sign", "--user", "nobody-here"]).status, 66)
    }

    /// Every other command of an embedded store once as a process, its exit status and its output through the client
    /// and keymgr-core: the classes that check these commands in depth run them in the test process
    /// (`Sandbox.CLIRun.inProcess`, docs/testing.md), so the binaries' own runs of them are here.
    func testTheOtherLocalCommandsAsProcesses() throws {
        sandbox = try Sandbox()
        try sandbox.initialise()
        let first = try XCTUnwrap(try sandbox.bind("alice")["kid"] as? String)
        try sandbox.bind("carol", ["--auth-type", "app-pin", "--pin-stdin"], stdin: "482916\n")

        let rebound = try sandbox.succeed(["rebind", "--user", "alice", "--auth-type", "none", "--json"]).object()
        let kid = try XCTUnwrap(rebound["kid"] as? String)
        XCTAssertNotEqual(kid, first)
        let changed = try sandbox.succeed(["pin", "change", "--user", "carol", "--pin-stdin", "--json"],
                                          stdin: "482916\n731905\n").object()
        XCTAssertEqual(changed["userId"] as? String, "carol")
        XCTAssertEqual(try sandbox.keymgr(["pin", "change", "--user", "carol", "--pin-stdin"], stdin: "482916\n905713\n").status,
                       77, "the old PIN no longer works")
        let jwk = try sandbox.succeed(["export", "--user", "alice"]).stdout
        XCTAssertTrue(jwk.contains("\"kty\":\"EC\"") && jwk.contains("\"kid\":\"\(kid)\""), jwk)

        try sandbox.succeed(["config", "set", "pin-min-length", "8"])
        XCTAssertEqual(try sandbox.succeed(["config", "show", "--json"]).object()["pinMinLength"] as? Int, 8)
        XCTAssertEqual(try sandbox.keymgr(["config", "set", "pin-min-length", "3"]).status, 64)

        try sandbox.succeed(["person", "link", "root", "alice"])
        XCTAssertEqual(try sandbox.succeed(["person", "list", "--json"]).array().count, 1)
        try sandbox.succeed(["person", "unlink", "root", "alice"])
        XCTAssertEqual(try sandbox.succeed(["person", "list", "--json"]).array().count, 0)

        XCTAssertEqual(try sandbox.succeed(["server", "list", "--json"]).array().count, 0)
        XCTAssertEqual(try sandbox.keymgr(["server", "remove", "--profile", "nope"]).status, 66)

        try sandbox.succeed(["master", "rotate", "--yes"])
        XCTAssertEqual(try sandbox.succeed(["sign", "--user", "alice", "--challenge", "after-rotate"]).status, 0)
        let revoked = try sandbox.succeed(["revoke", "--user", "alice", "--yes", "--json"]).array()
        XCTAssertEqual(revoked.map { $0["kid"] as? String }, [kid])
        XCTAssertEqual(try sandbox.keymgr(["revoke", "--user", "alice", "--yes"]).status, 66)

        XCTAssertEqual(try sandbox.succeed(["audit", "--event", "key.revoked", "--json"]).array().count, 1)
        let verified = try sandbox.succeed(["audit", "verify"])
        XCTAssertTrue(verified.stdout.contains("store intact"), verified.summary)
        XCTAssertEqual(try sandbox.succeed(["audit", "clear-tampering", "--json"]).object()["cleared"] as? Bool, false)
        let archive = sandbox.root.appendingPathComponent("archive.jsonl")
        let archived = try sandbox.succeed(["audit", "archive", "--before", "2999-01-01", "--output", archive.path, "--json"])
        XCTAssertGreaterThan(try archived.object()["entries"] as? Int ?? 0, 0, archived.summary)
        XCTAssertEqual(try sandbox.keymgr(["audit", "archive", "--before", "2999-01-01", "--output", archive.path]).status,
                       64, "an existing file is not overwritten")
        XCTAssertEqual(try sandbox.succeed(["audit", "verify", "--input", archive.path]).status, 0)
    }

    /// One agent: status, bind and sign through its socket as root, with the same answers as a direct run.
    func testOneAgentRoundTrip() throws {
        let agent = try AgentHarness()
        defer { agent.stop() }
        try agent.start()
        let bound = try agent.request(["bind", "--user", "dora", "--json"])
        XCTAssertEqual(bound.status, 0, bound.summary)
        let kid = try XCTUnwrap(try bound.object()["kid"] as? String)
        let signed = try agent.request(["sign", "--user", "dora", "--challenge", "through-the-agent"])
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(try jwsParts(signed.stdout).header["kid"] as? String, kid)
        let status = try agent.request(["status", "--json"])
        XCTAssertEqual(status.status, 0, status.summary)
        XCTAssertEqual(try status.object()["users"] as? Int, 1)
        XCTAssertEqual(try agent.request(["sign", "--user", "nobody-here"]).status, 66)
    }

    /// One journey: a bind through RegisterDevice, a sync, and a sign through SignIn against the reference server.
    func testOneJourneyBindAndSignIn() throws {
        try start(users: ["bob"])
        let kids = try registerSettled(["bob"])
        let signed = try sandbox.keymgr(["sign", "--journey", "SignIn", "--user", "bob", "--password-fd", "0", "--json"],
                                        stdin: RefServerProcess.password + "\n")
        XCTAssertEqual(signed.status, 0, signed.summary)
        XCTAssertEqual(try signed.object()["kid"] as? String, kids["bob"])
        // The fleet's commands against the server, as processes.
        let devices = try sandbox.succeed(["admin", "devices", "--user", "bob", "--json"]).array()
        XCTAssertEqual(devices.count, 1, "\(devices)")
        XCTAssertEqual(try sandbox.succeed(["admin", "stale", "--days", "30", "--json"]).array().count, 0)
        XCTAssertEqual(try sandbox.succeed(["server", "show", "--json"]).object()["dialect"] as? String, "pingam")
        let typo = try sandbox.keymgr(["admin", "revoke", "--user", "bob", "--device-id", "TYPO-NOT-A-DEVICE", "--reason",
                                       "stolen", "--yes", "--json"])
        try assertJSONError(typo, status: 66, code: "clientNotRegistered")
    }

    /// One device login: discovery, a registration, the device grant approved at the server, and `token print`.
    func testOneDeviceLogin() throws {
        try startOAuth()
        try registerClient("erin")
        let login = try login("erin")
        XCTAssertEqual(login.status, 0, login.summary)
        let printed = try sandbox.succeed(["token", "print", "--user", "erin"])
        XCTAssertFalse(printed.stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty)
        XCTAssertEqual(try tokens("erin")["tokenType"] as? String, "DPoP")
        // The OAuth commands that follow a login, as processes.
        XCTAssertNotNil(try sandbox.succeed(["dcr", "show", "--user", "erin", "--json"]).object()["clientId"] as? String)
        XCTAssertEqual(try sandbox.succeed(["token", "refresh", "--user", "erin", "--json"]).object()["tokenType"] as? String,
                       "DPoP")
        let proof = try sandbox.succeed(["dpop", "proof", "--user", "erin", "--htm", "GET", "--htu", "https://rs.example.com/"])
        XCTAssertEqual(proof.stdout.split(separator: ".").count, 3, proof.summary)
        try sandbox.succeed(["token", "revoke", "--user", "erin", "--yes"])
        XCTAssertEqual(try sandbox.keymgr(["token", "show", "--user", "erin", "--json"]).status, 66, "tokens gone")
        try sandbox.succeed(["dcr", "forget", "--user", "erin", "--yes"])
        XCTAssertEqual(try sandbox.keymgr(["dcr", "show", "--user", "erin"]).status, 66)
    }
}
