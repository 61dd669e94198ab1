import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// A device key as keymgr would hold it, signing JWS the way keymgr's `JWS.sign` does.
struct TestDeviceKey {
    let privateKey: P256PrivateKey
    let kid: String

    init(kid: String = UUID().uuidString) throws {
        privateKey = try P256PrivateKey.generate()
        self.kid = kid
    }

    var jwk: JWK { privateKey.publicKey.jwk(kid: kid) }

    /// The JWK as the server stores it.
    var storedKey: [String: String] {
        var key: [String: String] = [:]
        for (name, value) in jwk.jsonObject().objectValue ?? [:] { key[name] = value.stringValue }
        return key
    }

    /// The Device Binding node's JWS: header `typ`, `alg`, `kid`, `jwk`; claims `sub`, `challenge`,
    /// `iat`, `nbf`, `exp`, `iss`, `platform`.
    func bindingJWS(
        subject: String, challenge: String, issuer: String = "keymgr", issuedAt: Date = Date(),
        lifetime: TimeInterval = 60, platform: String? = "linux", headerKid: String? = nil,
        headerJWK: JWK? = nil
    ) throws -> String {
        let header: [String: JSONValue] = [
            "typ": "JWS", "alg": "ES256", "kid": .string(headerKid ?? kid), "jwk": (headerJWK ?? jwk).jsonObject(),
        ]
        var claims = Self.claims(subject: subject, challenge: challenge, issuer: issuer, issuedAt: issuedAt, lifetime: lifetime)
        if let platform { claims["platform"] = .string(platform) }
        return try JWS.sign(header: header, claims: claims, key: privateKey)
    }

    /// The Device Signing Verifier node's JWS: header `typ`, `alg`, `kid`.
    func signingJWS(
        subject: String, challenge: String, issuer: String = "keymgr", issuedAt: Date = Date(), headerKid: String? = nil
    ) throws -> String {
        let header: [String: JSONValue] = ["typ": "JWS", "alg": "ES256", "kid": .string(headerKid ?? kid)]
        var claims = Self.claims(subject: subject, challenge: challenge, issuer: issuer, issuedAt: issuedAt, lifetime: 60)
        claims["purpose"] = "checkout"
        return try JWS.sign(header: header, claims: claims, key: privateKey)
    }

    static func claims(
        subject: String, challenge: String, issuer: String, issuedAt: Date, lifetime: TimeInterval
    ) -> [String: JSONValue] {
        let iat = Int64(issuedAt.timeIntervalSince1970)
        return [
            "sub": .string(subject), "challenge": .string(challenge), "iss": .string(issuer),
            "iat": .int(iat), "nbf": .int(iat), "exp": .int(iat + Int64(lifetime)),
        ]
    }
}

final class JWSJourneyTests: ServerTestCase {
    let realm = "/realms/root/realms/alpha"

    override func makeConfiguration(databasePath: String) -> ReferenceServerConfiguration {
        ReferenceServerConfiguration(
            databasePath: databasePath, realmPaths: ["/realms/root", realm], adminToken: adminToken)
    }

    override func setUp() async throws {
        try await super.setUp()
        try await server.addUser("demo", password: "Ch4ngeit", realmPath: realm)
    }

    /// Runs the binding journey up to the DeviceBindingCallback; returns the step, userId and challenge.
    func bindingStep() async throws -> (JourneyClient, [String: Any], String, String) {
        let client = JourneyClient(url: server.authenticateURL(journey: "RegisterDevice", realmPath: realm))
        let first = try await client.start()
        let step = try await client.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"]).object()
        let output = try XCTUnwrap(outputs(of: "DeviceBindingCallback", in: step))
        return (client, step, try XCTUnwrap(output["userId"] as? String), try XCTUnwrap(output["challenge"] as? String))
    }

    func testBindingJourneyStoresANewRecordEachTime() async throws {
        for round in 1...2 {
            let key = try TestDeviceKey()
            let (client, step, userId, challenge) = try await bindingStep()
            let result = try await client.answer(
                step,
                [
                    "IDToken1jws": try key.bindingJWS(subject: userId, challenge: challenge),
                    "IDToken1deviceName": "Front desk", "IDToken1deviceId": "kiosk-1",
                ])
            XCTAssertEqual(result.status, 200)
            let success = try result.object()
            XCTAssertNotNil(success["tokenId"] as? String)
            XCTAssertEqual(success["successUrl"] as? String, "/console")
            XCTAssertEqual(success["realm"] as? String, "/alpha")

            let devices = try await server.devices(user: "demo", realmPath: realm)
            XCTAssertEqual(devices.count, round, "a rebind from the same deviceId adds a record")
            let stored = try XCTUnwrap(devices.last)
            XCTAssertEqual(stored.uuid, key.kid)
            XCTAssertEqual(stored.key, key.storedKey)
            XCTAssertEqual(stored.deviceId, "kiosk-1")
            XCTAssertEqual(stored.deviceName, "Front desk")
            XCTAssertEqual(stored.lastAccessDate, stored.createdDate)
        }
        let listing = try await send(
            "GET",
            URL(string: server.deviceCollectionURL(user: "demo", realmPath: realm).absoluteString + "?_queryFilter=true")!,
            headers: deviceHeaders
        ).object()
        XCTAssertEqual(listing["resultCount"] as? Int, 2)
    }

    func testBindingRefusesBadJWS() async throws {
        let other = try TestDeviceKey()
        let cases: [(String, (TestDeviceKey, String, String) throws -> String)] = [
            ("expired", { key, sub, challenge in
                try key.bindingJWS(subject: sub, challenge: challenge, issuedAt: Date().addingTimeInterval(-200))
            }),
            ("issued in the future", { key, sub, challenge in
                try key.bindingJWS(subject: sub, challenge: challenge, issuedAt: Date().addingTimeInterval(120))
            }),
            ("wrong challenge", { key, sub, _ in
                try key.bindingJWS(subject: sub, challenge: Data(repeating: 7, count: 32).base64EncodedString())
            }),
            ("wrong iss", { key, sub, challenge in try key.bindingJWS(subject: sub, challenge: challenge, issuer: "evil") }),
            ("wrong sub", { key, _, challenge in
                try key.bindingJWS(subject: "id=mallory,ou=user,o=alpha,ou=services,ou=am-config", challenge: challenge)
            }),
            ("no platform", { key, sub, challenge in try key.bindingJWS(subject: sub, challenge: challenge, platform: nil) }),
            ("header kid differs from jwk kid", { key, sub, challenge in
                try key.bindingJWS(subject: sub, challenge: challenge, headerKid: "another-kid")
            }),
            ("signed by another key", { key, sub, challenge in
                try key.bindingJWS(subject: sub, challenge: challenge, headerJWK: other.privateKey.publicKey.jwk(kid: key.kid))
            }),
            ("tampered payload", { key, sub, challenge in
                let parts = try key.bindingJWS(subject: sub, challenge: challenge).split(separator: ".")
                let forged = Base64URL.encode(Array(#"{"sub":"x"}"#.utf8))
                return "\(parts[0]).\(forged).\(parts[2])"
            }),
        ]
        for (name, makeJWS) in cases {
            let key = try TestDeviceKey()
            let (client, step, userId, challenge) = try await bindingStep()
            let result = try await client.answer(
                step, ["IDToken1jws": try makeJWS(key, userId, challenge), "IDToken1deviceId": "kiosk-1"])
            XCTAssertEqual(result.status, 401, name)
            XCTAssertEqual(try result.object()["message"] as? String, "Login failure", name)
        }
        let devices = try await server.devices()
        XCTAssertTrue(devices.isEmpty)
    }

    func testBindingWithinClockSkewIsAccepted() async throws {
        let key = try TestDeviceKey()
        let (client, step, userId, challenge) = try await bindingStep()
        // Expired 20 s ago: inside PingAM's 30 s skew.
        let jws = try key.bindingJWS(subject: userId, challenge: challenge, issuedAt: Date().addingTimeInterval(-80))
        let result = try await client.answer(step, ["IDToken1jws": jws, "IDToken1deviceId": "kiosk-1"])
        XCTAssertEqual(result.status, 200)
    }

    func testSigningJourneyUpdatesLastAccessDate() async throws {
        let key = try TestDeviceKey()
        try await server.addDevice(
            BoundDevice(
                uuid: key.kid, realmPath: realm, user: "demo", deviceId: "kiosk-1", deviceName: "Front desk",
                createdDate: 1_600_000_000_000, lastAccessDate: 1_600_000_000_000, key: key.storedKey))
        let client = JourneyClient(url: server.authenticateURL(journey: "SignIn", realmPath: realm))

        let first = try await client.start()
        let step = try await client.answer(first, ["IDToken1": "demo"]).object()
        let output = try XCTUnwrap(outputs(of: "DeviceSigningVerifierCallback", in: step))
        let userId = try XCTUnwrap(output["userId"] as? String)
        let challenge = try XCTUnwrap(output["challenge"] as? String)
        let before = Date()
        let result = try await client.answer(step, ["IDToken1jws": try key.signingJWS(subject: userId, challenge: challenge)])
        XCTAssertEqual(result.status, 200)
        XCTAssertEqual(try result.object()["realm"] as? String, "/alpha")

        let devices = try await server.devices(user: "demo", realmPath: realm)
        let stored = try XCTUnwrap(devices.first)
        XCTAssertGreaterThanOrEqual(stored.lastAccessDate, Int64(before.timeIntervalSince1970 * 1000) - 1)
        XCTAssertEqual(stored.createdDate, 1_600_000_000_000)
        XCTAssertNotEqual(stored.revision, key.kid)
    }

    /// Completes a binding journey for demo; returns the success body.
    func bind(noSession: Bool) async throws -> [String: Any] {
        var url = server.authenticateURL(journey: "RegisterDevice", realmPath: realm).absoluteString
        if noSession { url += "&noSession=true" }
        let client = JourneyClient(url: try XCTUnwrap(URL(string: url)))
        let first = try await client.start()
        let step = try await client.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"]).object()
        let output = try XCTUnwrap(outputs(of: "DeviceBindingCallback", in: step))
        let jws = try TestDeviceKey().bindingJWS(subject: try XCTUnwrap(output["userId"] as? String),
                                                 challenge: try XCTUnwrap(output["challenge"] as? String))
        let result = try await client.answer(step, ["IDToken1jws": jws, "IDToken1deviceId": "kiosk-1"])
        XCTAssertEqual(result.status, 200)
        return try result.object()
    }

    func testSessionsAreCountedUntilLoggedOutAndNoSessionOpensNone() async throws {
        let success = try await bind(noSession: false)
        let tokenId = try XCTUnwrap(success["tokenId"] as? String)
        var openCount = await server.openSessionCount()
        XCTAssertEqual(openCount, 1)
        let admin = try await send("GET", adminURL("sessions"), headers: ["Authorization": "Bearer \(adminToken)"]).object()
        XCTAssertEqual(admin["open"] as? Int, 1)

        let logoutURL = try XCTUnwrap(URL(string: server.baseURL.absoluteString + "/json\(realm)/sessions?_action=logout"))
        let wrong = try await send("POST", logoutURL, headers: ["iPlanetDirectoryPro": "not-a-session"], json: [:])
        XCTAssertEqual(wrong.status, 401)
        let logout = try await send("POST", logoutURL, headers: ["iPlanetDirectoryPro": tokenId,
                                                                 "Accept-API-Version": "resource=3.1, protocol=1.0"], json: [:])
        XCTAssertEqual(logout.status, 200)
        openCount = await server.openSessionCount()
        XCTAssertEqual(openCount, 0)
        let status = try await send("POST", logoutURL, headers: ["iPlanetDirectoryPro": tokenId], json: [:]).status
        XCTAssertEqual(status, 401,
                       "a session ends once")

        let quiet = try await bind(noSession: true)
        XCTAssertNil(quiet["tokenId"])
        XCTAssertEqual(quiet["successUrl"] as? String, "/console")
        openCount = await server.openSessionCount()
        XCTAssertEqual(openCount, 0)
    }

    func testSigningRefusesUnknownKidWrongChallengeAndForeignKey() async throws {
        let key = try TestDeviceKey()
        let stranger = try TestDeviceKey(kid: key.kid)
        try await server.addDevice(
            BoundDevice(
                uuid: key.kid, realmPath: realm, user: "demo", deviceId: "kiosk-1", deviceName: "Front desk",
                createdDate: 1_600_000_000_000, lastAccessDate: 1_600_000_000_000, key: key.storedKey))
        let client = JourneyClient(url: server.authenticateURL(journey: "SignIn", realmPath: realm))
        let cases: [(String, (String, String) throws -> String)] = [
            ("keyNotFound", { sub, challenge in try key.signingJWS(subject: sub, challenge: challenge, headerKid: "unknown") }),
            ("wrong challenge", { sub, _ in try key.signingJWS(subject: sub, challenge: "AAAA") }),
            ("expired", { sub, challenge in
                try key.signingJWS(subject: sub, challenge: challenge, issuedAt: Date().addingTimeInterval(-300))
            }),
            ("signed by a key the server never bound", { sub, challenge in try stranger.signingJWS(subject: sub, challenge: challenge) }),
        ]
        for (name, makeJWS) in cases {
            let first = try await client.start()
            let step = try await client.answer(first, ["IDToken1": "demo"]).object()
            let output = try XCTUnwrap(outputs(of: "DeviceSigningVerifierCallback", in: step))
            let jws = try makeJWS(try XCTUnwrap(output["userId"] as? String), try XCTUnwrap(output["challenge"] as? String))
            let result = try await client.answer(step, ["IDToken1jws": jws])
            XCTAssertEqual(result.status, 401, name)
        }
        let stored = try await server.devices(user: "demo", realmPath: realm)
        XCTAssertEqual(stored.first?.lastAccessDate, 1_600_000_000_000)
    }
}

/// Journeys of a deployment with a usernameless signing tree, a device limit and no regard for noSession.
final class JourneyPolicyTests: ServerTestCase {
    override func makeConfiguration(databasePath: String) -> ReferenceServerConfiguration {
        var configuration = ReferenceServerConfiguration(
            databasePath: databasePath, adminToken: adminToken,
            journeys: [.defaultBinding, .defaultSigning, Journey(name: "Usernameless", kind: .usernamelessSigning)])
        configuration.journeyPolicy.maxSavedDevices = 1
        configuration.journeyPolicy.honoursNoSession = false
        return configuration
    }

    func testAUsernamelessJourneyAcceptsAnyBoundKeyOfTheRealmSignedAsItsUser() async throws {
        let key = try TestDeviceKey()
        try await server.addDevice(
            BoundDevice(
                uuid: key.kid, realmPath: "/realms/root", user: "erin", deviceId: "kiosk-1", deviceName: "Front desk",
                createdDate: 1_600_000_000_000, lastAccessDate: 1_600_000_000_000, key: key.storedKey))
        let url = try XCTUnwrap(URL(string: server.authenticateURL(journey: "Usernameless").absoluteString + "&noSession=true"))
        for (subject, expected) in [("id=someone-else,ou=user,ou=am-config", 401), ("id=erin,ou=user,ou=am-config", 200)] {
            let client = JourneyClient(url: url)
            let first = try await client.start()
            XCTAssertEqual((first["callbacks"] as? [[String: Any]])?.compactMap { $0["type"] as? String },
                           ["DeviceSigningVerifierCallback"], "no NameCallback")
            let output = try XCTUnwrap(outputs(of: "DeviceSigningVerifierCallback", in: first))
            XCTAssertEqual(output["userId"] as? String, "")
            let jws = try key.signingJWS(subject: subject, challenge: try XCTUnwrap(output["challenge"] as? String))
            let result = try await client.answer(first, ["IDToken1jws": jws])
            XCTAssertEqual(result.status, expected, subject)
            if expected == 200 {
                XCTAssertNotNil(try result.object()["tokenId"] as? String, "this deployment ignores noSession")
            }
        }
        let openCount = await server.openSessionCount()
        XCTAssertEqual(openCount, 1)
    }

    func testABindingBeyondMaxSavedDevicesIsRefused() async throws {
        try await server.addUser("demo", password: "pw")
        for expected in [200, 401] {
            let client = JourneyClient(url: server.authenticateURL(journey: "RegisterDevice"))
            let first = try await client.start()
            let step = try await client.answer(first, ["IDToken1": "demo", "IDToken2": "pw"]).object()
            let output = try XCTUnwrap(outputs(of: "DeviceBindingCallback", in: step))
            let jws = try TestDeviceKey().bindingJWS(subject: try XCTUnwrap(output["userId"] as? String),
                                                     challenge: try XCTUnwrap(output["challenge"] as? String))
            let status = try await client.answer(step, ["IDToken1jws": jws, "IDToken1deviceId": "kiosk-1"]).status
            XCTAssertEqual(status, expected)
        }
        let devices = try await server.devices(user: "demo")
        XCTAssertEqual(devices.count, 1)
    }
}
