import Foundation
import KeyManager
@testable import ServerClients
import Synchronization
import XCTest

/// PingAM's journeys on the wire, against a stub HTTP client: callbacks answered by type, failures reported,
/// cookies carried, sessions ended.
final class PingAMJourneyClientTests: XCTestCase {
    private let server = PingAMServer(baseURL: URL(string: "https://am.example.com/am")!)
    private let credentials = JourneyCredentials(username: "dave") { "pw" }

    /// Step 1 asks for name and password and sets the load balancer's cookie; step 2 for a device binding (with a
    /// TextOutputCallback beside it); then success, with a session unless told otherwise.
    private func journeyStub(tokenId: String? = "session-token", timeout: Int? = 20, logoutStatus: Int = 200) -> StubHTTPClient {
        StubHTTPClient { request in
            let body = (try? JSONDecoder().decode(JSONValue.self, from: request.body ?? Data())) ?? .object([:])
            if request.url.path.hasSuffix("/sessions") {
                return StubHTTPClient.json(logoutStatus, logoutStatus == 200 ? #"{"result":"Successfully logged out"}"# : "{}")
            }
            guard let callbacks = body["callbacks"]?.arrayValue else {
                return StubHTTPClient.json(200, #"""
                    {"authId":"a1","callbacks":[
                      {"type":"NameCallback","output":[{"name":"prompt","value":"User Name"}],"input":[{"name":"IDToken1","value":""}]},
                      {"type":"PasswordCallback","output":[{"name":"prompt","value":"Password"}],"input":[{"name":"IDToken2","value":""}]}]}
                    """#, headers: ["set-cookie": "amlbcookie=01; Path=/; HttpOnly"])
            }
            if callbacks.first?["type"]?.stringValue == "NameCallback" {
                let timeoutOutput = timeout.map { #",{"name":"timeout","value":\#($0)}"# } ?? ""
                return StubHTTPClient.json(200, #"""
                    {"authId":"a2","callbacks":[{"type":"DeviceBindingCallback","output":[
                      {"name":"userId","value":"id=dave,ou=user,ou=am-config"},{"name":"challenge","value":"c-1"},
                      {"name":"authenticationType","value":"NONE"}\#(timeoutOutput)],
                     "input":[{"name":"IDToken1jws","value":""},{"name":"IDToken1deviceName","value":""},
                              {"name":"IDToken1deviceId","value":""},{"name":"IDToken1clientError","value":""}]},
                     {"type":"TextOutputCallback","output":[{"name":"message","value":"hello"}],"input":[]},
                     {"type":"PasswordCallback","output":[{"name":"prompt","value":"Password again"}],"input":[{"name":"IDToken3","value":""}]}]}
                    """#)
            }
            guard let tokenId else { return StubHTTPClient.json(200, #"{"successUrl":"/am/console","realm":"/"}"#) }
            return StubHTTPClient.json(200, #"{"tokenId":"\#(tokenId)","successUrl":"/am/console"}"#,
                                       headers: ["set-cookie": "iPlanetDirectoryPro=\(tokenId); Path=/; HttpOnly"])
        }
    }

    private func body(_ request: HTTPRequest) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: request.body ?? Data())
    }

    private func input(_ step: JSONValue, _ name: String) -> String? {
        for callback in step["callbacks"]?.arrayValue ?? [] {
            for input in callback["input"]?.arrayValue ?? [] where input["name"]?.stringValue == name {
                return input["value"]?.stringValue
            }
        }
        return nil
    }

    func testNameAndPasswordAreFilledAndTheDeviceCallbackIsHandedOver() async throws {
        let stub = journeyStub()
        let client = PingAMJourneyClient(server: server, http: stub)
        let seen = try await client.run(journey: "RegisterDevice", credentials: credentials,
                                        answering: "DeviceBindingCallback") { callback in
            DeviceAnswer(inputs: ["jws": .string("header.payload.signature")],
                                             value: (try callback.output("userId"), try callback.jwsLifetime()))
        }
        XCTAssertEqual(seen.0, "id=dave,ou=user,ou=am-config")
        XCTAssertEqual(seen.1, 20)
        let requests = stub.requests
        XCTAssertEqual(requests.count, 4, "three steps and the logout")
        XCTAssertEqual(requests[0].url.path, "/am/json/realms/root/authenticate")
        XCTAssertTrue(requests[0].url.query?.contains("authIndexValue=RegisterDevice") == true)
        let second = try body(requests[1])
        XCTAssertEqual(input(second, "IDToken1"), "dave")
        XCTAssertEqual(input(second, "IDToken2"), "pw")
        let third = try body(requests[2])
        XCTAssertEqual(input(third, "IDToken1jws"), "header.payload.signature")
        XCTAssertEqual(input(third, "IDToken3"), "pw", "the step's other callbacks are answered too")
    }

    func testEveryStepCarriesTheAPIVersionAndTheJourneysCookies() async throws {
        let stub = journeyStub()
        _ = try await PingAMJourneyClient(server: server, http: stub).run(
            journey: "RegisterDevice", credentials: credentials, answering: "DeviceBindingCallback") { _ in
            DeviceAnswer(inputs: ["jws": .string("j")], value: 0)
        }
        let steps = stub.requests.filter { $0.url.path.hasSuffix("/authenticate") }
        XCTAssertEqual(steps.count, 3)
        for step in steps {
            XCTAssertEqual(step.headers["Accept-API-Version"], "resource=2.1, protocol=1.0")
            XCTAssertTrue(step.url.query?.contains("noSession=true") == true, step.url.absoluteString)
        }
        XCTAssertNil(steps[0].headers["Cookie"], "a new journey starts with an empty jar")
        XCTAssertEqual(steps[1].headers["Cookie"], "amlbcookie=01")
        XCTAssertEqual(steps[2].headers["Cookie"], "amlbcookie=01")

        // A second run (another user's journey) starts empty again: jars are never shared.
        let again = journeyStub()
        _ = try await PingAMJourneyClient(server: server, http: again).run(
            journey: "RegisterDevice", credentials: .init(username: "erin") { "pw" },
            answering: "DeviceBindingCallback") { _ in DeviceAnswer(inputs: [:], value: 0) }
        XCTAssertNil(again.requests[0].headers["Cookie"])
    }

    func testASessionTheServerOpensAnywayIsLoggedOutWithItsCookieName() async throws {
        let stub = journeyStub(tokenId: "tok-123*")
        _ = try await PingAMJourneyClient(server: server, http: stub).run(
            journey: "RegisterDevice", credentials: credentials, answering: "DeviceBindingCallback") { _ in
            DeviceAnswer(inputs: [:], value: 0)
        }
        let logout = try XCTUnwrap(stub.requests.last)
        XCTAssertEqual(logout.method, "POST")
        XCTAssertEqual(logout.url.path, "/am/json/realms/root/sessions")
        XCTAssertEqual(logout.url.query, "_action=logout")
        XCTAssertEqual(logout.headers["iPlanetDirectoryPro"], "tok-123*")
        XCTAssertEqual(logout.headers["Accept-API-Version"], "resource=3.1, protocol=1.0")

        let none = journeyStub(tokenId: nil)
        _ = try await PingAMJourneyClient(server: server, http: none).run(
            journey: "RegisterDevice", credentials: credentials, answering: "DeviceBindingCallback") { _ in
            DeviceAnswer(inputs: [:], value: 0)
        }
        XCTAssertFalse(none.requests.contains { $0.url.path.hasSuffix("/sessions") }, "no session, nothing to end")
    }

    func testALogoutTheServerRefusesIsReportedWithoutTheTokenAndTheJourneyStillSucceeds() async throws {
        let stub = journeyStub(tokenId: "tok-secret*", logoutStatus: 500)
        let reported = Mutex<[String]>([])
        let value = try await PingAMJourneyClient(server: server, http: stub).run(
            journey: "RegisterDevice", credentials: credentials, answering: "DeviceBindingCallback",
            sessionNotEnded: { error in reported.withLock { $0.append(error.message) } }) { _ in
            DeviceAnswer(inputs: [:], value: 7)
        }
        XCTAssertEqual(value, 7, "the server accepted the binding: a stuck logout must not undo it")
        let messages = reported.withLock { $0 }
        XCTAssertEqual(messages.count, 1)
        XCTAssertFalse(messages.joined().contains("tok-secret"), "the tokenId is never shown")
    }

    func testEachLocalFailureIsReportedWithItsClientErrorKeepingTheOtherCallbacks() async throws {
        let cases: [(any Error, String)] = [
            (KeyManagerError(.unAuthorize, "wrong PIN"), "Abort"),
            (KeyManagerError(.pinLocked, "locked"), "Abort"),
            (KeyManagerError(.invalidCustomClaims, "sub is reserved"), "Abort"),
            (KeyManagerError(.abort, "cancelled"), "Abort"),
            (KeyManagerError(.usage, "choose a key"), "Abort"),
            (KeyManagerError(.unsupported, "no verifier"), "Unsupported"),
            (KeyManagerError(.clientNotRegistered, "no key"), "ClientNotRegistered"),
            (KeyManagerError(.timeout, "verifier too slow"), "Timeout"),
            (CancellationError(), "Abort"),
        ]
        for (failure, expected) in cases {
            let stub = journeyStub()
            let client = PingAMJourneyClient(server: server, http: stub)
            do {
                _ = try await client.run(journey: "RegisterDevice", credentials: credentials,
                                         answering: "DeviceBindingCallback") { _ -> DeviceAnswer<Int> in
                    throw failure
                }
                XCTFail("the failure was swallowed")
            } catch {
                XCTAssertEqual(String(describing: error), String(describing: failure))
            }
            let report = try XCTUnwrap(stub.requests.last { $0.url.path.hasSuffix("/authenticate") })
            let last = try body(report)
            XCTAssertEqual(input(last, "IDToken1clientError"), expected, "\(failure)")
            XCTAssertEqual(input(last, "IDToken3"), "pw", "the step's other callbacks stay in the answer")
            XCTAssertEqual(last["callbacks"]?.arrayValue?.count, 3)
            XCTAssertEqual(report.headers["Cookie"], "amlbcookie=01")
        }
    }

    func testTheCallbacksTimeoutBoundsTheWholeAnswer() async throws {
        let stub = journeyStub(timeout: 1)
        let release = DispatchSemaphore(value: 0)
        defer { release.signal() }
        do {
            _ = try await PingAMJourneyClient(server: server, http: stub).run(
                journey: "RegisterDevice", credentials: credentials, answering: "DeviceBindingCallback") { _ in
                // A PIN prompt nobody answers.
                release.wait()
                return DeviceAnswer(inputs: [:], value: 0)
            }
            XCTFail("the deadline did not hold")
        } catch let error as KeyManagerError {
            XCTAssertEqual(error.code, .timeout)
        }
        let report = try XCTUnwrap(stub.requests.last { $0.url.path.hasSuffix("/authenticate") })
        XCTAssertEqual(input(try body(report), "IDToken1clientError"), "Timeout")
    }

    func testDeviceCallbackDefaultsFollowTheSDKs() {
        XCTAssertEqual(DeviceCallback(type: "DeviceSigningVerifierCallback", outputs: [:]).operationTimeout, 30)
        XCTAssertEqual(DeviceCallback(type: "DeviceBindingCallback", outputs: [:]).operationTimeout, 60)
        XCTAssertEqual(DeviceCallback(type: "DeviceSigningVerifierCallback", outputs: ["timeout": .int(5)]).operationTimeout, 5)
        XCTAssertEqual(try DeviceCallback(type: "DeviceSigningVerifierCallback", outputs: [:]).jwsLifetime(), 30)
    }

    func testFoldedSetCookieLinesSplitAtCookiesNotAtDates() {
        var jar = CookieJar()
        jar.store(setCookie: "amlbcookie=01; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/, iPlanetDirectoryPro=abc*; Path=/")
        XCTAssertEqual(jar.header, "amlbcookie=01; iPlanetDirectoryPro=abc*")
        jar.store(setCookie: "amlbcookie=; Max-Age=0")
        XCTAssertEqual(jar.header, "iPlanetDirectoryPro=abc*")
        XCTAssertEqual(jar.name(ofValue: "abc*"), "iPlanetDirectoryPro")
    }

    func testAJourneyThatEndsWithoutTheDeviceCallbackIsRejectedAndItsSessionEnded() async throws {
        let stub = StubHTTPClient { request in
            request.url.path.hasSuffix("/sessions") ? StubHTTPClient.json(200, "{}") : StubHTTPClient.json(200, #"{"tokenId":"session"}"#)
        }
        do {
            _ = try await PingAMJourneyClient(server: server, http: stub).run(
                journey: "Login", credentials: credentials,
                answering: "DeviceSigningVerifierCallback") { _ -> DeviceAnswer<Int> in
                XCTFail("no device callback came")
                return DeviceAnswer(inputs: [:], value: 0)
            }
            XCTFail("a journey without the device callback succeeded")
        } catch let error as TransportError {
            XCTAssertEqual(error.code, .serverRejected)
        }
        XCTAssertEqual(stub.requests.last?.headers["iPlanetDirectoryPro"], "session")
    }
}
