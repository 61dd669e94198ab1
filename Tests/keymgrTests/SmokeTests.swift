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
    }
}
