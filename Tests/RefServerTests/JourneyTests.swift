import Foundation
import XCTest

@testable import RefServer

/// Walks PingAM's callback protocol: POST the returned JSON back with inputs filled in, carrying the cookies the
/// server set during the journey (its load balancer's affinity cookie), as the SDKs do.
final class JourneyClient: @unchecked Sendable {
    let url: URL
    /// `name=value` pairs the server set in this journey; `returnsCookies = false` forgets to send them.
    private(set) var cookies: [String: String] = [:]
    var returnsCookies = true

    init(url: URL) { self.url = url }

    func start() async throws -> [String: Any] {
        let result = try await post(json: [:])
        XCTAssertEqual(result.status, 200)
        return try result.object()
    }

    /// Fills the named inputs of every callback and posts the step back.
    func answer(_ step: [String: Any], _ values: [String: String]) async throws -> HTTPResult {
        var step = step
        let callbacks = (step["callbacks"] as? [[String: Any]] ?? []).map { callback -> [String: Any] in
            var callback = callback
            callback["input"] = (callback["input"] as? [[String: Any]] ?? []).map { input -> [String: Any] in
                var input = input
                if let name = input["name"] as? String, let value = values[name] { input["value"] = value }
                return input
            }
            return callback
        }
        step["callbacks"] = callbacks
        return try await post(json: step)
    }

    private func post(json: Any) async throws -> HTTPResult {
        var headers = ["Accept-API-Version": "resource=2.1, protocol=1.0"]
        if returnsCookies, !cookies.isEmpty {
            headers["Cookie"] = cookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")
        }
        let result = try await send("POST", url, headers: headers, json: json)
        if let setCookie = result.header("Set-Cookie"), let pair = setCookie.split(separator: ";").first {
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { cookies[parts[0]] = parts[1] }
        }
        return result
    }
}

/// The output values of the first callback of `type` in a step.
func outputs(of type: String, in step: [String: Any]) -> [String: Any]? {
    guard let callback = (step["callbacks"] as? [[String: Any]])?.first(where: { $0["type"] as? String == type })
    else { return nil }
    var values: [String: Any] = [:]
    for output in callback["output"] as? [[String: Any]] ?? [] {
        if let name = output["name"] as? String { values[name] = output["value"] }
    }
    return values
}

/// The input names of the first callback of `type` in a step.
func inputNames(of type: String, in step: [String: Any]) -> [String] {
    let callback = (step["callbacks"] as? [[String: Any]])?.first { $0["type"] as? String == type }
    return (callback?["input"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
}

func assertLoginFailure(_ result: HTTPResult, file: StaticString = #filePath, line: UInt = #line) throws {
    XCTAssertEqual(result.status, 401, file: file, line: line)
    let body = try result.object(file: file, line: line)
    XCTAssertEqual(body["code"] as? Int, 401, file: file, line: line)
    XCTAssertEqual(body["reason"] as? String, "Unauthorized", file: file, line: line)
    XCTAssertEqual(body["message"] as? String, "Login failure", file: file, line: line)
}

final class JourneyTests: ServerTestCase {
    override func makeConfiguration(databasePath: String) -> ReferenceServerConfiguration {
        ReferenceServerConfiguration(
            databasePath: databasePath, realmPaths: ["/realms/root", "/realms/root/realms/alpha"],
            adminToken: adminToken,
            journeys: [
                Journey(name: "RegisterDevice", kind: .deviceBinding(.applicationPIN)),
                .defaultSigning,
            ])
    }

    var binding: JourneyClient!

    override func setUp() async throws {
        try await super.setUp()
        try await server.addUser("demo", password: "Ch4ngeit", realmPath: "/realms/root/realms/alpha")
        binding = JourneyClient(url: server.authenticateURL(journey: "RegisterDevice", realmPath: "/realms/root/realms/alpha"))
    }

    func testBindingJourneyAsksForCredentialsThenBinding() async throws {
        let first = try await binding.start()
        XCTAssertNotNil(first["authId"] as? String)
        XCTAssertEqual(
            (first["callbacks"] as? [[String: Any]])?.compactMap { $0["type"] as? String },
            ["NameCallback", "PasswordCallback"])
        XCTAssertEqual(inputNames(of: "NameCallback", in: first), ["IDToken1"])
        XCTAssertEqual(inputNames(of: "PasswordCallback", in: first), ["IDToken2"])

        let second = try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"])
        XCTAssertEqual(second.status, 200)
        let step = try second.object()
        XCTAssertNotEqual(step["authId"] as? String, first["authId"] as? String)
        let output = try XCTUnwrap(outputs(of: "DeviceBindingCallback", in: step))
        XCTAssertEqual(output["userId"] as? String, "id=demo,ou=user,o=alpha,ou=services,ou=am-config")
        XCTAssertEqual(output["username"] as? String, "demo")
        XCTAssertEqual(output["authenticationType"] as? String, "APPLICATION_PIN")
        XCTAssertEqual(output["timeout"] as? Int, 60)
        XCTAssertNotNil(output["title"] as? String)
        XCTAssertNotNil(output["subtitle"] as? String)
        XCTAssertNotNil(output["description"] as? String)
        let challenge = try XCTUnwrap(output["challenge"] as? String)
        XCTAssertEqual(Data(base64Encoded: challenge)?.count, 32)
        XCTAssertEqual(
            inputNames(of: "DeviceBindingCallback", in: step),
            ["IDToken1jws", "IDToken1deviceName", "IDToken1deviceId", "IDToken1clientError"])
    }

    func testWrongPasswordFails() async throws {
        let first = try await binding.start()
        try assertLoginFailure(try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "wrong"]))
        // The user lives in alpha, not in root.
        let root = JourneyClient(url: server.authenticateURL(journey: "RegisterDevice"))
        let rootFirst = try await root.start()
        try assertLoginFailure(try await root.answer(rootFirst, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"]))
    }

    func testClientErrorsEndTheJourney() async throws {
        for clientError in ["Unsupported", "ClientNotRegistered", "Timeout", "Abort"] {
            let first = try await binding.start()
            let step = try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"]).object()
            try assertLoginFailure(
                try await binding.answer(step, ["IDToken1clientError": clientError, "IDToken1deviceId": "d"]))
        }
        let devices = try await server.devices()
        XCTAssertTrue(devices.isEmpty)
        let reported = await server.clientErrors()
        XCTAssertEqual(reported.map(\.clientError), ["Unsupported", "ClientNotRegistered", "Timeout", "Abort"])
        XCTAssertEqual(Set(reported.map(\.callback)), ["DeviceBindingCallback"])
        XCTAssertEqual(Set(reported.map(\.user)), ["demo"])
        let listed = try await send("GET", adminURL("client-errors"), headers: ["Authorization": "Bearer \(adminToken)"]).object()
        XCTAssertEqual((listed["result"] as? [[String: Any]])?.compactMap { $0["clientError"] as? String },
                       ["Unsupported", "ClientNotRegistered", "Timeout", "Abort"])
    }

    func testTheFirstStepSetsTheAffinityCookieAndAStepWithoutItFails() async throws {
        let first = try await binding.start()
        XCTAssertEqual(binding.cookies.keys.sorted(), ["amlbcookie"])
        // A client that drops the cookie reaches a node that does not know the journey.
        binding.returnsCookies = false
        let lost = try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"])
        XCTAssertEqual(lost.status, 401)
        XCTAssertEqual(try lost.object()["message"] as? String, "Session has timed out")
        // The authId is spent: the journey is over even with the cookie.
        binding.returnsCookies = true
        let status = try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"]).status
        XCTAssertEqual(status, 401)
        // A fresh journey that returns its cookie goes on.
        let again = try await binding.start()
        let goesOn = try await binding.answer(again, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"]).status
        XCTAssertEqual(goesOn, 200)
    }

    func testMissingOrGarbageJWSFails() async throws {
        let first = try await binding.start()
        let step = try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"]).object()
        try assertLoginFailure(
            try await binding.answer(step, ["IDToken1jws": "not.a.jws", "IDToken1deviceId": "kiosk-1"]))
    }

    func testAnAuthIdIsSingleUseAndUnknownOnesFail() async throws {
        let first = try await binding.start()
        _ = try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"])
        let replay = try await binding.answer(first, ["IDToken1": "demo", "IDToken2": "Ch4ngeit"])
        XCTAssertEqual(replay.status, 401)
        let forged = try await send("POST", binding.url, json: ["authId": "forged", "callbacks": []])
        XCTAssertEqual(forged.status, 401)
    }

    func testUnknownJourneyIsRefused() async throws {
        let result = try await send("POST", server.authenticateURL(journey: "NoSuchTree"), json: [:])
        XCTAssertEqual(result.status, 400)
        XCTAssertEqual(try result.object()["code"] as? Int, 400)
    }

    func testSigningJourneyWithoutDevicesFails() async throws {
        let signing = JourneyClient(url: server.authenticateURL(journey: "SignIn", realmPath: "/realms/root/realms/alpha"))
        let first = try await signing.start()
        XCTAssertEqual((first["callbacks"] as? [[String: Any]])?.compactMap { $0["type"] as? String }, ["NameCallback"])
        try assertLoginFailure(try await signing.answer(first, ["IDToken1": "demo"]))
    }

    func testSigningJourneyOffersTheVerifierCallback() async throws {
        _ = try await server.addDevice(
            BoundDevice(
                uuid: "kid-1", realmPath: "/realms/root/realms/alpha", user: "demo", deviceId: "d", deviceName: "n",
                createdDate: 0, lastAccessDate: 0, key: ["kid": "kid-1"]))
        let signing = JourneyClient(url: server.authenticateURL(journey: "SignIn", realmPath: "/realms/root/realms/alpha"))
        let first = try await signing.start()
        let step = try await signing.answer(first, ["IDToken1": "demo"]).object()
        let output = try XCTUnwrap(outputs(of: "DeviceSigningVerifierCallback", in: step))
        XCTAssertEqual(output["userId"] as? String, "id=demo,ou=user,o=alpha,ou=services,ou=am-config")
        XCTAssertEqual(Data(base64Encoded: output["challenge"] as? String ?? "")?.count, 32)
        XCTAssertEqual(output["timeout"] as? Int, 60)
        XCTAssertEqual(inputNames(of: "DeviceSigningVerifierCallback", in: step), ["IDToken1jws", "IDToken1clientError"])
        try assertLoginFailure(try await signing.answer(step, ["IDToken1clientError": "Abort"]))
    }

    func testUniversalIdEscapesDNSpecials() async throws {
        XCTAssertEqual(server.universalId(of: "demo"), "id=demo,ou=user,ou=am-config")
        XCTAssertEqual(
            server.universalId(of: "a,b=c", realmPath: "/realms/root/realms/alpha"),
            "id=a\\,b\\=c,ou=user,o=alpha,ou=services,ou=am-config")
    }
}
