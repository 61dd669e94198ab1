import Foundation
import KeyManager
@testable import ServerClients
import XCTest

/// PingAM's journeys on the wire, against a stub HTTP client: callbacks answered by type, failures reported.
final class PingAMJourneyClientTests: XCTestCase {
    private let server = PingAMServer(baseURL: URL(string: "https://am.example.com/am")!)

    /// Step 1 asks for name and password; step 2 for a device binding; then success.
    private func journeyStub() -> StubHTTPClient {
        StubHTTPClient { request in
            let body = (try? JSONDecoder().decode(JSONValue.self, from: request.body ?? Data())) ?? .object([:])
            guard let callbacks = body["callbacks"]?.arrayValue else {
                return StubHTTPClient.json(200, #"""
                    {"authId":"a1","callbacks":[
                      {"type":"NameCallback","output":[{"name":"prompt","value":"User Name"}],"input":[{"name":"IDToken1","value":""}]},
                      {"type":"PasswordCallback","output":[{"name":"prompt","value":"Password"}],"input":[{"name":"IDToken2","value":""}]}]}
                    """#)
            }
            if callbacks.first?["type"]?.stringValue == "NameCallback" {
                return StubHTTPClient.json(200, #"""
                    {"authId":"a2","callbacks":[{"type":"DeviceBindingCallback","output":[
                      {"name":"userId","value":"id=dave,ou=user,ou=am-config"},{"name":"challenge","value":"c-1"},
                      {"name":"authenticationType","value":"NONE"},{"name":"timeout","value":20}],
                     "input":[{"name":"IDToken1jws","value":""},{"name":"IDToken1deviceName","value":""},
                              {"name":"IDToken1deviceId","value":""},{"name":"IDToken1clientError","value":""}]}]}
                    """#)
            }
            return StubHTTPClient.json(200, #"{"tokenId":"session","successUrl":"/am/console"}"#)
        }
    }

    func testNameAndPasswordAreFilledAndTheDeviceCallbackIsHandedOver() async throws {
        let stub = journeyStub()
        let client = PingAMJourneyClient(server: server, http: stub)
        var seen: (userId: String, lifetime: Int)?
        try await client.run(journey: "RegisterDevice",
                             credentials: .init(username: "dave") { SecretBytes(utf8: "pw") },
                             answering: "DeviceBindingCallback") { callback in
            seen = (try callback.output("userId"), try callback.jwsLifetime())
            callback.set("jws", .string("header.payload.signature"))
        }
        XCTAssertEqual(seen?.userId, "id=dave,ou=user,ou=am-config")
        XCTAssertEqual(seen?.lifetime, 20)
        let requests = stub.requests
        XCTAssertEqual(requests.count, 3)
        XCTAssertEqual(requests[0].url.path, "/am/json/realms/root/authenticate")
        XCTAssertTrue(requests[0].url.query?.contains("authIndexValue=RegisterDevice") == true)
        let second = try JSONDecoder().decode(JSONValue.self, from: requests[1].body ?? Data())
        let inputs = second["callbacks"]?.arrayValue?.compactMap { $0["input"]?.arrayValue?.first?["value"]?.stringValue }
        XCTAssertEqual(inputs, ["dave", "pw"])
        let third = try JSONDecoder().decode(JSONValue.self, from: requests[2].body ?? Data())
        XCTAssertEqual(third["callbacks"]?.arrayValue?.first?["input"]?.arrayValue?.first?["value"]?.stringValue,
                       "header.payload.signature")
    }

    func testALocalFailureIsReportedToTheServerAsAClientErrorThenRethrown() async throws {
        let stub = journeyStub()
        let client = PingAMJourneyClient(server: server, http: stub)
        do {
            try await client.run(journey: "RegisterDevice", credentials: .init(username: "dave") { SecretBytes(utf8: "pw") },
                                 answering: "DeviceBindingCallback") { _ in
                throw KeyManagerError(.abort, "the user cancelled")
            }
            XCTFail("the failure was swallowed")
        } catch let error as KeyManagerError {
            XCTAssertEqual(error.code, .abort)
        }
        let last = try JSONDecoder().decode(JSONValue.self, from: stub.requests.last?.body ?? Data())
        let inputs = last["callbacks"]?.arrayValue?.first?["input"]?.arrayValue ?? []
        XCTAssertEqual(inputs.first { $0["name"]?.stringValue == "IDToken1clientError" }?["value"]?.stringValue, "Abort")
    }

    func testAJourneyThatEndsWithoutTheDeviceCallbackIsRejected() async throws {
        let stub = StubHTTPClient { _ in StubHTTPClient.json(200, #"{"tokenId":"session"}"#) }
        do {
            try await PingAMJourneyClient(server: server, http: stub).run(
                journey: "Login", credentials: .init(username: "dave") { SecretBytes(utf8: "") },
                answering: "DeviceSigningVerifierCallback") { _ in XCTFail("no device callback came") }
            XCTFail("a journey without the device callback succeeded")
        } catch let error as TransportError {
            XCTAssertEqual(error.code, .serverRejected)
        }
    }
}
