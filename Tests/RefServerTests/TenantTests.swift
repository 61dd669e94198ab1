import Foundation
import XCTest

@testable import RefServer

/// Tenants (`/t/<id>/…`): every route again, each tenant with users, devices, clients, tokens, faults and a journal
/// of its own, and URLs (issuer, endpoints, registration URIs, DPoP `htu`) that carry its full base URL.
final class TenantTests: OAuthServerTestCase {
    let admin = ["Authorization": "Bearer \(adminToken)"]

    /// `{server}/t/<id>`.
    func base(_ tenant: String) -> String { server.baseURL.absoluteString + "/t/" + tenant }

    func url(_ tenant: String?, _ path: String) throws -> URL {
        try XCTUnwrap(URL(string: (tenant.map(base) ?? server.baseURL.absoluteString) + path))
    }

    /// The `result` array of an admin listing of `tenant` (nil: the server's own).
    func listing(_ tenant: String?, _ path: String, file: StaticString = #filePath, line: UInt = #line) async throws
        -> [[String: Any]] {
        let answer = try await send("GET", try url(tenant, path), headers: admin)
        XCTAssertEqual(answer.status, 200, path, file: file, line: line)
        return try XCTUnwrap(try answer.object()["result"] as? [[String: Any]], file: file, line: line)
    }

    func deviceCount(_ tenant: String?, user: String, file: StaticString = #filePath, line: UInt = #line) async throws -> Int? {
        let answer = try await send(
            "GET", try url(tenant, "/json/realms/root/users/\(user)/devices/2fa/binding?_queryFilter=true"),
            headers: deviceHeaders)
        guard answer.status == 200 else { return nil }
        return (try answer.object()["result"] as? [Any])?.count
    }

    func testTwoTenantsDoNotSeeEachOthersUsersDevicesFaultsOrJournals() async throws {
        for tenant in ["a", "b"] {
            let added = try await send(
                "POST", try url(tenant, "/__refserver/users"), headers: admin, json: ["username": "alice", "password": "pw-\(tenant)"])
            XCTAssertEqual(added.status, 201)
        }
        let bob = try await send("POST", try url("a", "/__refserver/users"), headers: admin, json: ["username": "bob", "password": "pw"])
        XCTAssertEqual(bob.status, 201)
        let usersInA = try await listing("a", "/__refserver/users").compactMap { $0["username"] as? String }.sorted()
        XCTAssertEqual(usersInA, ["alice", "bob"])
        let usersInB = try await listing("b", "/__refserver/users").compactMap { $0["username"] as? String }
        XCTAssertEqual(usersInB, ["alice"])
        let usersOfTheServer = try await listing(nil, "/__refserver/users").count
        XCTAssertEqual(usersOfTheServer, 0, "the server's own routes are a tenant apart")

        let device: [String: Any] = ["user": "alice", "deviceId": "device-1", "deviceName": "kiosk",
                                     "key": ["kty": "EC", "crv": "P-256", "x": "x", "y": "y", "kid": "kid-of-a"]]
        let seeded = try await send("POST", try url("a", "/__refserver/devices"), headers: admin, json: device)
        XCTAssertEqual(seeded.status, 201)
        let deviceCountInA = try await deviceCount("a", user: "alice")
        let deviceCountInB = try await deviceCount("b", user: "alice")
        XCTAssertEqual(deviceCountInA, 1)
        XCTAssertEqual(deviceCountInB, 0)
        let devicesListedInB = try await listing("b", "/__refserver/devices").count
        XCTAssertEqual(devicesListedInB, 0)
        let devicesOfTheServer = try await server.devices().count
        XCTAssertEqual(devicesOfTheServer, 0)

        let fault = try await send("PUT", try url("a", "/__refserver/faults/alice"), headers: admin, json: ["fault": "status500"])
        XCTAssertEqual(fault.status, 200)
        let deviceCountInAWithFault = try await deviceCount("a", user: "alice")
        let deviceCountInBWithoutFault = try await deviceCount("b", user: "alice")
        XCTAssertNil(deviceCountInAWithFault, "a's fault answers 500 in a")
        XCTAssertEqual(deviceCountInBWithoutFault, 0, "and nothing in b")
        let faultsInB = try await send("GET", try url("b", "/__refserver/faults"), headers: admin)
        XCTAssertEqual((try faultsInB.object()["faults"] as? [String: Any])?.count, 0)
        let rootFaults = await server.faults()
        XCTAssertTrue(rootFaults.isEmpty)

        // Each journal holds its own requests, with the targets as the tenant sees them.
        let targets = { (tenant: String) in
            try await self.listing(tenant, "/__refserver/requests").compactMap { $0["target"] as? String }
        }
        let inA = try await targets("a")
        let inB = try await targets("b")
        let deviceTarget = "/json/realms/root/users/alice/devices/2fa/binding?_queryFilter=true"
        XCTAssertEqual(inA, [deviceTarget, deviceTarget], "\(inA)")
        XCTAssertEqual(inB, [deviceTarget, deviceTarget], "\(inB)")
        let cleared = try await send("DELETE", try url("a", "/__refserver/requests"), headers: admin)
        XCTAssertEqual(cleared.status, 204)
        let journalOfA = try await targets("a")
        XCTAssertEqual(journalOfA, [])
        let journalOfB = try await targets("b")
        XCTAssertEqual(journalOfB, [deviceTarget, deviceTarget], "clearing a's journal leaves b's")
        let rootJournal = await server.recordedRequests()
        XCTAssertEqual(rootJournal.count, 0)
    }

    func testTwoTenantsDoNotSeeEachOthersClientsOrTokensAndEachNamesItsOwnBaseURL() async throws {
        for tenant in ["a", "b"] {
            // RFC 8414 §3.1: the well-known part inserted before the issuer's path, or appended to it.
            for path in ["/.well-known/oauth-authorization-server/t/\(tenant)", "/t/\(tenant)/.well-known/oauth-authorization-server",
                         "/t/\(tenant)/.well-known/openid-configuration"] {
                let metadata = try await send("GET", try url(nil, path)).object()
                XCTAssertEqual(metadata["issuer"] as? String, base(tenant), path)
                XCTAssertEqual(metadata["token_endpoint"] as? String, base(tenant) + "/oauth/v2/oauth-token", path)
                XCTAssertEqual(metadata["registration_endpoint"] as? String,
                               base(tenant) + "/oauth/v2/oauth-dynamic-client-registration", path)
            }
        }
        let registered = try await send(
            "POST", try url("a", "/oauth/v2/oauth-dynamic-client-registration"),
            headers: ["Authorization": "Bearer \(initialAccessToken)"], json: ["software_id": "keymgr-template"])
        XCTAssertEqual(registered.status, 201)
        let client = try client(from: registered.object())
        XCTAssertTrue(client.registrationClientURI.absoluteString.hasPrefix(base("a") + "/"), client.registrationClientURI.absoluteString)
        let read = try await send("GET", client.registrationClientURI, headers: ["Authorization": "Bearer \(client.registrationAccessToken)"])
        XCTAssertEqual(read.status, 200, "the registration URI is the tenant's")
        // Curity rotates the secret on a read.
        let secret = try read.object()["client_secret"] as? String ?? client.clientSecret ?? ""
        let clientsInA = try await listing("a", "/__refserver/oauth/clients").count
        XCTAssertEqual(clientsInA, 1)
        let clientsInB = try await listing("b", "/__refserver/oauth/clients").count
        XCTAssertEqual(clientsInB, 0)
        let clientsOfTheServer = try await server.oauthClients().count
        XCTAssertEqual(clientsOfTheServer, 0)

        let key = try DPoPTestKey()
        let minted = try await send(
            "POST", try url("a", "/__refserver/oauth/tokens"), headers: admin,
            json: ["client_id": client.clientId, "subject": "alice", "jkt": key.jkt])
        XCTAssertEqual(minted.status, 201)
        let refreshToken = try XCTUnwrap(try minted.object()["refresh_token"] as? String)
        let tokensInB = try await listing("b", "/__refserver/oauth/tokens").count
        XCTAssertEqual(tokensInB, 0)
        let tokensOfTheServer = try await server.oauthTokens().count
        XCTAssertEqual(tokensOfTheServer, 0)

        let form = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        let basic = basicAuthorization(client.clientId, secret)
        // The proof must name the tenant's endpoint: the same path on the server's own routes is another URL.
        let elsewhere = try await sendForm(
            try url("a", "/oauth/v2/oauth-token"), form,
            headers: ["Authorization": basic, "DPoP": try key.proof("POST", try url(nil, "/oauth/v2/oauth-token"))])
        XCTAssertEqual(elsewhere.status, 400)
        XCTAssertEqual(try elsewhere.object()["error"] as? String, "invalid_dpop_proof")
        let inB = try await sendForm(
            try url("b", "/oauth/v2/oauth-token"), form,
            headers: ["Authorization": basic, "DPoP": try key.proof("POST", try url("b", "/oauth/v2/oauth-token"))])
        XCTAssertNotEqual(inB.status, 200, "b knows neither the client nor the token")
        // A fault (here an outage) armed on b's token endpoint is b's alone.
        let outage = try await send("PUT", try url("b", "/__refserver/oauth/faults/token"), headers: admin, json: ["fault": "status500"])
        XCTAssertEqual(outage.status, 200)
        let faultsOfA = try await send("GET", try url("a", "/__refserver/oauth/faults"), headers: admin)
        XCTAssertEqual((try faultsOfA.object()["faults"] as? [String: Any])?.count, 0)
        let good = try await sendForm(
            try url("a", "/oauth/v2/oauth-token"), form,
            headers: ["Authorization": basic, "DPoP": try key.proof("POST", try url("a", "/oauth/v2/oauth-token"))])
        XCTAssertEqual(good.status, 200, String(decoding: good.body, as: UTF8.self))
    }

    func testTenantsAreMadeByTheAdministratorOrOnFirstUseAndBadOnesAreRefused() async throws {
        let anonymous = try await send("PUT", try url(nil, "/__refserver/tenants/x"), json: ["arguments": [String]()])
        XCTAssertEqual(anonymous.status, 401)
        let made = try await send("PUT", try url(nil, "/__refserver/tenants/x"), headers: admin, json: ["arguments": [String]()])
        XCTAssertEqual(made.status, 201)
        XCTAssertEqual(try made.object()["baseURL"] as? String, base("x"))
        let again = try await send("PUT", try url(nil, "/__refserver/tenants/x"), headers: admin)
        XCTAssertEqual(again.status, 409)
        let badId = try await send("PUT", try url(nil, "/__refserver/tenants/a.b"), headers: admin)
        XCTAssertEqual(badId.status, 400)
        let arguments = try await send(
            "PUT", try url(nil, "/__refserver/tenants/y"), headers: admin, json: ["arguments": ["--auth-type", "APPLICATION_PIN"]])
        XCTAssertEqual(arguments.status, 400, "an in-process server has no configurator for arguments")
        let health = try await send("GET", try url("z", "/__refserver/health"))
        XCTAssertEqual(health.status, 200, "made on first use")
        let badOnFirstUse = try await send("GET", try url("a.b", "/__refserver/health"))
        XCTAssertEqual(badOnFirstUse.status, 400)
        let ids = try await listing(nil, "/__refserver/tenants").compactMap { $0["id"] as? String }
        XCTAssertEqual(ids, ["x", "z"])
    }

    func testTheTargetIsSplitIntoTheTenantAndWhatItServes() {
        XCTAssertEqual(TenantTarget("/t/abc/json/x?y"), TenantTarget(tenant: "abc", target: "/json/x?y"))
        XCTAssertEqual(TenantTarget("/t/abc?y"), TenantTarget(tenant: "abc", target: "/?y"))
        XCTAssertEqual(TenantTarget("/t/abc"), TenantTarget(tenant: "abc", target: "/"))
        XCTAssertEqual(TenantTarget("/json/t/abc"), TenantTarget(tenant: nil, target: "/json/t/abc"))
        XCTAssertEqual(TenantTarget("/.well-known/openid-configuration/t/abc/oauth/x"),
                       TenantTarget(tenant: "abc", target: "/.well-known/openid-configuration/oauth/x"))
        XCTAssertEqual(TenantTarget("/.well-known/oauth-authorization-server/t/abc"),
                       TenantTarget(tenant: "abc", target: "/.well-known/oauth-authorization-server"))
    }
}
